/*
 * test_header_cpp.cpp - the public header compiles as C++ (it is included
 * from .cu files) and its functions link with C linkage: calls
 * tier_version() and tier_strerror(-5) (-EIO) from C++.
 * Exit 0 when both return text and the errno text is EIO's.
 */
#include "tierstore.h"

#include <cstring>

int main()
{
	const char *version = tier_version();
	const char *eio = tier_strerror(-5);

	if (version == nullptr || eio == nullptr)
		return 1;
	return std::strstr(eio, "Input/output") != nullptr ? 0 : 1;
}
