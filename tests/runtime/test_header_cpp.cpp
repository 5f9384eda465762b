/*
 * test_header_cpp.cpp - the public headers compile as C++ (they are
 * included from .cu files) and their functions link with C linkage: calls
 * tier_version() and tier_strerror(-5) (-EIO) from C++, and expands a
 * counter list of tierstore/live.h.  tierstore/live.h comes first: it must
 * stand alone (it includes tierstore.h itself).
 * Exit 0 when both return text, the errno text is EIO's, and the live
 * level structure is its fixed fields and one u64 or double per counter.
 */
#include "tierstore/live.h"
#include "tierstore.h"
#include "tierstore/toolkit.h"

#include <cstring>

#define ONE(...) +1

int main()
{
	const char *version = tier_version();
	const char *eio = tier_strerror(-5);
	const size_t counters = 0 TIER_LIVE_LEVEL_COUNTERS(ONE);

	if (version == nullptr || eio == nullptr)
		return 1;
	if (sizeof(tier_live_level) != 24 + 8 * counters)
		return 1;
	return std::strstr(eio, "Input/output") != nullptr ? 0 : 1;
}
