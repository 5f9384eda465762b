/*
 * nodlclose.c - a dlclose() that unloads nothing, preloaded into the
 * communicator's MPI tests in an ASan build alone (tests/meson.build).
 *
 * Open MPI unloads its MCA components at MPI_Finalize; LeakSanitizer,
 * which reports at exit, then sees the components' allocations as
 * "<unknown module>" and no suppression can name them.  With the
 * components still mapped, tests/helpers/lsan-mpi.supp names Open MPI's libraries
 * and components, and leaks of ours are still reported.
 */
int dlclose(void *handle);

int dlclose(void *handle)
{
	(void)handle;
	return 0;
}
