/* The main of the test programs over the fake GPU libraries (fake_util.h). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_util.h"
#include "harness.h"

#ifndef SYMM_HAVE_KERNELS
/* A build without nvcc has no embedded kernels: the tests load a kernel
 * file instead (SYMM_COLL_KERNELS; the fake driver loads any image), so
 * that they run in such builds (make test-sanitize) too. */
static char fake_kernels_path[64];
static void remove_fake_kernels(void) { unlink(fake_kernels_path); }
static void use_fake_kernels(void) {
  snprintf(fake_kernels_path, sizeof fake_kernels_path, "/tmp/symm-fake-kernels-%d",
           (int)getpid());
  FILE *f = fopen(fake_kernels_path, "wb");
  if (!f || fputs("fake kernel image", f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", fake_kernels_path);
    exit(1);
  }
  atexit(remove_fake_kernels);
  setenv("SYMM_COLL_KERNELS", fake_kernels_path, 1);
}
#endif

int fake_tests_main(int argc, char **argv, const fake_test_t *tests, size_t n) {
#ifndef SYMM_HAVE_KERNELS
  use_fake_kernels();
#endif
  if (argc != 2) {
    fprintf(stderr, "usage: %s NAME | --list\n", argv[0]);
    return 2;
  }
  for (size_t i = 0; i < n; i++) {
    if (strcmp(argv[1], "--list") == 0) printf("%s\n", tests[i].name);
    else if (strcmp(argv[1], tests[i].name) == 0) return tests[i].fn();
  }
  if (strcmp(argv[1], "--list") == 0) return 0;
  fprintf(stderr, "no test named %s\n", argv[1]);
  return 2;
}

int fake_probe_refused(symm_backend_t backend, const char *needle) {
  char why[1024] = "";
  ASSERT_RES(symm_backend_available(backend, why, sizeof why), SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(why, needle);
  setenv("SYMM_BACKEND", symm_backend_name(backend), 1);
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_BACKEND_UNAVAILABLE);
  ASSERT_STR_CONTAINS(symm_last_error(), needle);
  ASSERT(comm == NULL);
  return 0;
}
