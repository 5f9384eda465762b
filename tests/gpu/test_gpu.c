/*
 * test_gpu.c - the CUDA paths on a machine with a GPU: device discovery,
 * the self-test kernel, and the manifest's GPU resolution (auto picks a
 * device, capacity defaults to 90% of its memory, a percentage resolves
 * against it, more than it has is refused).  Exits 77 without a device.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "runtime/manifest/manifest.h"
#include "t_helpers.h"
#include "tiers/gpu.h"

/* Check forks each test: CUDA is first touched inside the test bodies. */

START_TEST(test_discovery)
{
	struct ts_gpu_info gi;
	char why[200] = "";
	int n = -1;

	ck_assert_int_eq(gpu_count(&n, why, sizeof(why)), 0);
	ck_assert_int_gt(n, 0);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(gpu_info(i, &gi), 0);
		ck_assert_int_eq(gi.index, i);
		ck_assert_uint_gt(gi.total_mem, 1ull << 30);
		ck_assert_int_gt(gi.cc_major, 0);
		ck_assert_msg(strlen(gi.pci_bus_id) >= 7, "bus id '%s'", gi.pci_bus_id);
		printf("GPU %d: %s, %llu bytes, cc %d.%d, PCI %s\n", i, gi.name,
		       (unsigned long long)gi.total_mem, gi.cc_major, gi.cc_minor, gi.pci_bus_id);
	}
	ck_assert_int_eq(gpu_info(n, &gi), -ENODEV);
}
END_TEST

START_TEST(test_selftest)
{
	int rc = gpu_selftest(0);

	ck_assert_msg(rc == 0, "%s", tier_last_error());
	ck_assert_int_eq(gpu_selftest(999), -ENODEV);
}
END_TEST

START_TEST(test_manifest_gpu)
{
	struct tier_manifest *m = NULL;
	struct ts_gpu_info gi;
	const struct tier_manifest *c;
	const char *auto_text = "gpu:\n  device: auto\ndram:\n  capacity: 512MiB\n";
	const char *pct_text = "gpu:\n  device: 0\n  capacity: 50%\ndram:\n  capacity: 512MiB\n";
	const char *over_text = "gpu:\n  device: 0\n  capacity: 100PiB\ndram:\n  capacity: 512MiB\n";

	ck_assert_int_eq(gpu_info(0, &gi), 0);
	ck_assert_msg(tier_manifest_parse(auto_text, strlen(auto_text), "auto", 0, &m) == 0,
		      "%s", tier_last_error());
	c = m;
	ck_assert_int_eq(c->tiers.gpu, 0);
	ck_assert(c->gpu_auto);
	ck_assert_uint_eq(c->gpu_mem, gi.total_mem);
	ck_assert_uint_eq(c->tiers.hbm_capacity, (gi.total_mem / 10 * 9) & ~((2ull << 20) - 1));
	printf("auto: GPU %d %s, HBM tier %llu bytes, NUMA node %d\n", c->tiers.gpu, c->gpu_name,
	       (unsigned long long)c->tiers.hbm_capacity, c->tiers.numa_node);
	tier_manifest_free(m);

	ck_assert_int_eq(tier_manifest_parse(pct_text, strlen(pct_text), "pct", 0, &m), 0);
	ck_assert_uint_eq(m->tiers.hbm_capacity,
			  (gi.total_mem / 2) & ~((2ull << 20) - 1));
	tier_manifest_free(m);

	ck_assert_int_eq(tier_manifest_parse(over_text, strlen(over_text), "over", 0, &m), -EINVAL);
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "over:3:13: gpu.capacity:"));
	ck_assert_ptr_nonnull(strstr(tier_last_error(), "is more than GPU 0 has"));
}
END_TEST

int main(void)
{
	Suite *s;
	TCase *tc;

	if (!t_gpu_present(NULL))
		return T_EXIT_SKIP;
	s = suite_create("gpu");
	tc = tcase_create("cuda");
	tcase_add_test(tc, test_discovery);
	tcase_add_test(tc, test_selftest);
	tcase_add_test(tc, test_manifest_gpu);
	suite_add_tcase(s, tc);
	return t_run_suite(s);
}
