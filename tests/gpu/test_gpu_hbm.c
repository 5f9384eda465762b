/*
 * test_gpu_hbm.c - the "cuda" HBM backend on a machine with a GPU: the
 * contract rows of tests/tiers/test_hbm.c (round trips, FIFO order per
 * direction, submitting threads, callbacks re-submitting, close() waiting,
 * bad copies and opens, and the fault sites) on the cuda backend alone.
 * There a row that cannot run is a failure, not a skip; without a device
 * the whole program exits 77 (SKIP).
 */
#define TEST_HBM_NO_MAIN
#include "../tiers/test_hbm.c"

#include <sys/wait.h>
#include <unistd.h>

/* In the child of t_gpu_present: a GPU is not enough without the backend. */
static bool cuda_backend_built(void)
{
	if (hbm_backend_find("cuda"))
		return true;
	fprintf(stderr, "a GPU, but no cuda HBM backend in this build\n");
	return false;
}

int main(void)
{
	if (!t_gpu_present(cuda_backend_built))
		return T_EXIT_SKIP;
	g_require_cuda = true;
	return t_run_suite(hbm_suite(true));
}
