/* Settings: bad values refused by symm_comm_init with a message that names
 * the variable, the value and what is accepted; good spellings of every
 * kind; the warning about SYMM_* variables that are no setting; the public
 * listing, and symmem-info agreeing with the library.  Single-rank
 * communicators on the host backend. */
#include <unistd.h>

#include "symm_test_access.h"
#include "harness.h"

#define OUT_CAP (256 * 1024)

/* A lone process on the host backend, whatever launcher ran the tests. */
static void lone_host_env(void) {
  static const char *const vars[] = {"SYMM_RANK", "SYMM_WORLD_SIZE", "SYMM_LOCAL_RANK",
                                     "SYMM_LOCAL_SIZE", "RANK", "WORLD_SIZE",
                                     "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                                     "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                                     "SYMM_STORE_ADDR", "MASTER_ADDR", "SYMM_TIMEOUT_MS",
                                     "SYMM_DEBUG", "SYMM_DEBUG_SUBSYS", "SYMM_DEBUG_FILE", NULL};
  for (int i = 0; vars[i]; i++) unsetenv(vars[i]);
  setenv("SYMM_BACKEND", "host", 1);
}

/* symm_comm_init with name=value set: the result; a communicator made is
 * destroyed at once. */
static symm_result_t init_with(const char *name, const char *value) {
  setenv(name, value, 1);
  symm_comm_t *comm = (symm_comm_t *)0x1;
  symm_result_t res = symm_comm_init(NULL, &comm);
  unsetenv(name);
  if (res != SYMM_SUCCESS) ASSERT_PTR_EQ(comm, NULL);
  symm_comm_destroy(res == SYMM_SUCCESS ? comm : NULL);
  return res;
}

typedef struct bad_case {
  const char *name, *value;
  const char *says[2]; /* what the message must also say: reason, accepted */
} bad_case_t;

static const bad_case_t bad_cases[] = {
    {"SYMM_TIMEOUT_MS", "1.5s", {"not an integer", "an integer in 1..2147483647"}},
    {"SYMM_TIMEOUT_MS", "abc", {"not an integer", "an integer in 1..2147483647"}},
    {"SYMM_TIMEOUT_MS", "-1", {"out of range", "an integer in 1..2147483647"}},
    {"SYMM_TIMEOUT_MS", "99999999999", {"out of range", "an integer in 1..2147483647"}},
    {"SYMM_TIMEOUT_MS", "0", {"out of range", "1..2147483647"}},
    {"SYMM_TIMEOUT_MS", "99999999999999999999", {"out of range", "1..2147483647"}},
    {"SYMM_POOL_BYTES", "lots", {"not a size", "K, M or G suffix"}},
    {"SYMM_POOL_BYTES", "-1", {"not a size", "64K"}},
    {"SYMM_POOL_BYTES", "1.5G", {"not a size", "1M"}},
    {"SYMM_SCRATCH_BYTES", "99999999999999999999", {"not a size", "4G"}},
    {"SYMM_HOST_SLICE_BYTES", "4Q", {"not a size", "K, M or G"}},
    {"SYMM_HOST_CMA", "on", {"unknown cross-memory attach mode", "auto, off"}},
    {"SYMM_STORE_PORT", "70000", {"out of range", "1..65535"}},
    {"SYMM_STORE_HANDSHAKE_MS", "5s", {"not an integer", "1..2147483647"}},
    {"SYMM_STORE_EXTERNAL", "maybe", {"not a boolean", "1/0, true/false, yes/no, on/off"}},
    {"SYMM_BOOTSTRAP_SHM", "2", {"not a boolean", "yes/no"}},
    {"SYMM_GPU_PDL", "enabled", {"not a boolean", "on/off"}},
    {"SYMM_BACKEND", "bogus", {"unknown backend", "auto, host, native, cuda, nccl, nvshmem"}},
    {"SYMM_ALLREDUCE_ALGO", "fast", {"unknown algorithm", "auto, one_shot, two_shot, ll, ll128"}},
    {"SYMM_DEBUG", "LOUD", {"unknown log level", "NONE, WARN, INFO, TRACE"}},
    {"SYMM_NATIVE_HANDLE", "ipc", {"unknown handle type", "auto, fd, fabric"}},
    {"SYMM_DEBUG_SUBSYS", "INIT,DISK", {"unknown subsystem \"DISK\"", "BOOTSTRAP"}},
    {"SYMM_COLL_MAX_BLOCKS", "many", {"not an integer", "an integer in 0..1024"}},
    {"SYMM_COLL_MAX_BLOCKS", "5000", {"out of range", "an integer in 0..1024"}},
    {"SYMM_COLL_MAX_BLOCKS", "-5", {"out of range", "an integer in 0..1024"}},
    {"SYMM_COLL_LL_THREADS", "33", {"out of range", "a multiple of 32 in 0..512"}},
    {"SYMM_COLL_LL_THREADS", "1024", {"out of range", "a multiple of 32 in 0..512"}},
    {"SYMM_COLL_LL_THREADS", "-32", {"out of range", "a multiple of 32 in 0..512"}},
    {"SYMM_SIGNAL_PAD_BYTES", "5000", {"out of range", "a multiple of 4096 in 4096..1048576 bytes"}},
    {"SYMM_SIGNAL_PAD_BYTES", "2M", {"out of range", "a multiple of 4096 in 4096..1048576"}},
    {"SYMM_SIGNAL_PAD_BYTES", "0", {"out of range", "a multiple of 4096"}},
    {"SYMM_RANK", "first", {"not an integer", "0..16777216"}},
    {"SYMM_DEVICE", "-2", {"out of range", "0..2147483647"}},
};

/* Each bad value fails symm_comm_init with SYMM_ERR_INVALID_ARG and a
 * message naming the variable, the value and what is accepted; the
 * settings in force stay as they were, and the next init succeeds. */
TEST_IMPL(settings_bad_values_fail_init) {
  lone_host_env();
  ASSERT_OK(init_with("SYMM_TIMEOUT_MS", "4321"));
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const bad_case_t *c = &bad_cases[i];
    symm_result_t res = init_with(c->name, c->value);
    if (res != SYMM_ERR_INVALID_ARG)
      TEST_FAIL_("%s=%s: %s, expected invalid argument (%s)", c->name, c->value,
                 symm_strerror(res), symm_last_error());
    char head[256];
    snprintf(head, sizeof head, "setting %s=%s refused: ", c->name, c->value);
    ASSERT_STR_CONTAINS(symm_last_error(), head);
    ASSERT_STR_CONTAINS(symm_last_error(), c->says[0]);
    ASSERT_STR_CONTAINS(symm_last_error(), c->says[1]);
    ASSERT_EQ(symm_settings()->SYMM_TIMEOUT_MS, 4321);
  }
  ASSERT_OK(init_with("SYMM_TIMEOUT_MS", "1234"));
  ASSERT_EQ(symm_settings()->SYMM_TIMEOUT_MS, 1234);
  return 0;
}

/* A secret's refused value is not repeated in the message. */
TEST_IMPL(settings_secret_not_echoed) {
  lone_host_env();
  static const char *const secrets[] = {"SYMM_TOKEN"};
  for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++) {
    size_t n = 0;
    const symm_setting_desc_t *t = symm_settings_table(&n);
    for (size_t k = 0; k < n; k++)
      if (!strcmp(t[k].name, secrets[i])) ASSERT(t[k].secret);
  }
  setenv("SYMM_TOKEN", "tok3n-s3cret-42", 1);
  for (size_t i = 0; i < symm_setting_count(); i++) {
    symm_setting_info_t info;
    ASSERT_OK(symm_setting_get(i, &info));
    if (strcmp(info.name, "SYMM_TOKEN")) continue;
    ASSERT(info.secret && info.per_job);
    ASSERT_STR_CONTAINS(info.value, "(set");
    ASSERT(strstr(info.value, "tok3n") == NULL);
  }
  unsetenv("SYMM_TOKEN");
  return 0;
}

/* Sizes in bytes or with K/M/G suffixes, every boolean spelling, enum
 * names in any case, and the empty string as unset. */
TEST_IMPL(settings_good_values) {
  lone_host_env();
  static const struct {
    const char *text;
    size_t bytes;
  } sizes[] = {{"4096", 4096},       {"0", 0},           {"64K", 64 << 10},
               {"64k", 64 << 10},    {"3584K", 3584 << 10}, {"1M", 1 << 20},
               {"2G", (size_t)2 << 30}, {"4KiB", 4096},   {"1MB", 1 << 20}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    setenv("SYMM_POOL_BYTES", sizes[i].text, 1);
    ASSERT_OK(symm_settings_load());
    if (symm_settings()->SYMM_POOL_BYTES != sizes[i].bytes)
      TEST_FAIL_("SYMM_POOL_BYTES=%s read %zu, expected %zu", sizes[i].text,
                 symm_settings()->SYMM_POOL_BYTES, sizes[i].bytes);
  }
  ASSERT_OK(init_with("SYMM_POOL_BYTES", "64M")); /* and init takes it */
  static const char *const yes[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON"};
  static const char *const no[] = {"0", "false", "False", "no", "NO", "off", "Off"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    setenv("SYMM_STORE_EXTERNAL", yes[i], 1);
    setenv("SYMM_BOOTSTRAP_SHM", no[i], 1);
    ASSERT_OK(symm_settings_load());
    if (!symm_settings()->SYMM_STORE_EXTERNAL || symm_settings()->SYMM_BOOTSTRAP_SHM)
      TEST_FAIL_("%s read as false or %s as true", yes[i], no[i]);
  }
  unsetenv("SYMM_STORE_EXTERNAL");
  ASSERT_OK(init_with("SYMM_BOOTSTRAP_SHM", "off"));
  setenv("SYMM_ALLREDUCE_ALGO", "LL128", 1);
  setenv("SYMM_NATIVE_HANDLE", "Fabric", 1);
  ASSERT_OK(symm_settings_load());
  ASSERT_EQ(symm_settings()->SYMM_ALLREDUCE_ALGO.index, SYMM_ALGO_LL128);
  ASSERT_STR_CONTAINS(symm_settings()->SYMM_ALLREDUCE_ALGO.name, "ll128");
  ASSERT_STR_CONTAINS(symm_settings()->SYMM_NATIVE_HANDLE.name, "fabric");
  unsetenv("SYMM_ALLREDUCE_ALGO");
  unsetenv("SYMM_NATIVE_HANDLE");
  /* Integers at their bounds. */
  ASSERT_OK(init_with("SYMM_TIMEOUT_MS", "2147483647"));
  /* 1 ms is taken; an init that short may run out of it on a busy machine
   * (its store round trip), which is no refusal of the value. */
  const symm_result_t one_ms = init_with("SYMM_TIMEOUT_MS", "1");
  if (one_ms != SYMM_SUCCESS) ASSERT_RES(one_ms, SYMM_ERR_TIMEOUT);
  ASSERT_OK(init_with("SYMM_COLL_MAX_BLOCKS", "1024"));
  ASSERT_OK(init_with("SYMM_COLL_LL_THREADS", "512"));
  ASSERT_OK(init_with("SYMM_COLL_LL_THREADS", "0"));
  ASSERT_OK(init_with("SYMM_SIGNAL_PAD_BYTES", "1M"));
  ASSERT_OK(init_with("SYMM_SIGNAL_PAD_BYTES", "8K"));
  ASSERT_OK(init_with("SYMM_DEBUG_SUBSYS", "^store,COLL"));
  /* Empty: unset, the default applies. */
  setenv("SYMM_TIMEOUT_MS", "", 1);
  setenv("SYMM_POOL_BYTES", "", 1);
  ASSERT_OK(symm_settings_load());
  ASSERT_EQ(symm_settings()->SYMM_TIMEOUT_MS, 60000);
  ASSERT_EQ(symm_settings()->SYMM_POOL_BYTES, (size_t)4 << 30);
  ASSERT_EQ(symm_settings()->SYMM_DEVICE, -1); /* unset, no default */
  ASSERT_PTR_EQ(symm_settings()->SYMM_COLL_KERNELS, NULL);
  unsetenv("SYMM_TIMEOUT_MS");
  unsetenv("SYMM_POOL_BYTES");
  return 0;
}

/* A snapshot in force never changes under its reader: a later load with
 * other values publishes another one, and the strings are copies. */
TEST_IMPL(settings_snapshot_stable) {
  lone_host_env();
  setenv("SYMM_STORE_BIND", "127.0.0.2", 1);
  ASSERT_OK(symm_settings_load());
  const symm_settings_t *before = symm_settings();
  ASSERT_OK(symm_settings_load()); /* nothing changed: the same snapshot */
  ASSERT_PTR_EQ(symm_settings(), before);
  setenv("SYMM_STORE_BIND", "0.0.0.0", 1);
  ASSERT_OK(symm_settings_load());
  ASSERT(symm_settings() != before);
  ASSERT_STR_CONTAINS(before->SYMM_STORE_BIND, "127.0.0.2");
  ASSERT_STR_CONTAINS(symm_settings()->SYMM_STORE_BIND, "0.0.0.0");
  unsetenv("SYMM_STORE_BIND");
  return 0;
}

/* ------------------------------------------------- unknown variables */

typedef struct {
  int saved;
  FILE *file;
} stderr_capture_t;

static void capture_stderr(stderr_capture_t *c) {
  fflush(stderr);
  c->file = tmpfile();
  ASSERT(c->file != NULL);
  c->saved = dup(2);
  ASSERT(c->saved >= 0);
  ASSERT(dup2(fileno(c->file), 2) == 2);
}

/* Ends the capture; the text, malloc'd. */
static char *captured_stderr(stderr_capture_t *c) {
  fflush(stderr);
  ASSERT(dup2(c->saved, 2) == 2);
  close(c->saved);
  char *text = calloc(1, OUT_CAP);
  ASSERT(text != NULL);
  rewind(c->file);
  size_t n = fread(text, 1, OUT_CAP - 1, c->file);
  text[n] = 0;
  fclose(c->file);
  return text;
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* What two communicators' init and destroy in this process print on
 * stderr: a warning is said once per process, not per communicator.
 * check, if not NULL, runs with each communicator up. */
static char *stderr_of_two_inits(void (*check)(void)) {
  stderr_capture_t cap;
  capture_stderr(&cap);
  for (int i = 0; i < 2; i++) {
    symm_comm_t *comm = NULL;
    ASSERT_OK(symm_comm_init(NULL, &comm));
    if (check) check();
    symm_comm_destroy(comm);
  }
  return captured_stderr(&cap);
}

/* One warning per unknown SYMM_* variable and process, naming the closest
 * setting; the project's own SYMM_ variables that are no setting (the
 * test harness's, the GPU scripts') draw none. */
TEST_IMPL(settings_unknown_variable_warns) {
  lone_host_env();
  setenv("SYMM_TIMEOUT", "5", 1);
  setenv("SYMM_POOL_BYTE", "1M", 1);
  setenv("SYMM_TEST_BACKEND", "host", 1);
  setenv("SYMM_GPU_TEST_TIMEOUT", "900", 1);
  setenv("SYMM_BENCH_RANKS", "2 4", 1);
  char *text = stderr_of_two_inits(NULL);
  ASSERT_EQ(count_of(text, "unknown setting SYMM_TIMEOUT; did you mean SYMM_TIMEOUT_MS?"), 1);
  ASSERT_EQ(count_of(text, "unknown setting SYMM_POOL_BYTE; did you mean SYMM_POOL_BYTES?"), 1);
  ASSERT_STR_CONTAINS(text, "symm WARN");
  ASSERT(strstr(text, "SYMM_TEST_BACKEND") == NULL);
  ASSERT(strstr(text, "SYMM_GPU_TEST_TIMEOUT") == NULL);
  ASSERT(strstr(text, "SYMM_BENCH_RANKS") == NULL);
  ASSERT_EQ(count_of(text, "unknown setting"), 2);
  free(text);
  return 0;
}

static void gpu_pdl_is_off(void) { ASSERT(!symm_settings()->SYMM_GPU_PDL); }

/* An old name (SYMM_NATIVE_PDL, now SYMM_GPU_PDL) is still read while the
 * new one is unset, with one warning saying so; the new name wins. */
TEST_IMPL(settings_old_name_read_with_warning) {
  lone_host_env();
  setenv("SYMM_NATIVE_PDL", "0", 1);
  char *text = stderr_of_two_inits(gpu_pdl_is_off);
  ASSERT_EQ(count_of(text, "SYMM_NATIVE_PDL is an old name of SYMM_GPU_PDL"), 1);
  ASSERT_EQ(count_of(text, "unknown setting"), 0);
  free(text);
  setenv("SYMM_GPU_PDL", "1", 1);
  ASSERT_OK(symm_settings_load());
  ASSERT(symm_settings()->SYMM_GPU_PDL);
  unsetenv("SYMM_GPU_PDL");
  setenv("SYMM_NATIVE_PDL", "sometimes", 1);
  ASSERT_RES(symm_settings_load(), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_GPU_PDL=sometimes refused: not a boolean");
  unsetenv("SYMM_NATIVE_PDL");
  return 0;
}

/* ------------------------------------------- listing and symmem-info */

/* The listing matches the declarations; every default is a value the
 * parser takes; enums' choices are in the order of the C enums they map
 * to; an INT without default can read -1 as "unset". */
TEST_IMPL(settings_listing) {
  lone_host_env();
  size_t n = 0;
  const symm_setting_desc_t *t = symm_settings_table(&n);
  ASSERT_EQ(symm_setting_count(), n);
  ASSERT_GE(n, 30);
  symm_setting_info_t info;
  ASSERT_RES(symm_setting_get(n, &info), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "out of range");
  ASSERT_RES(symm_setting_get(0, NULL), SYMM_ERR_INVALID_ARG);
  static const char *const kinds[] = {"int", "size", "bool", "string", "enum"};
  for (size_t i = 0; i < n; i++) {
    ASSERT_OK(symm_setting_get(i, &info));
    ASSERT(!strcmp(info.name, t[i].name));
    ASSERT(!strcmp(info.type, kinds[t[i].type]));
    ASSERT(strncmp(info.name, "SYMM_", 5) == 0);
    ASSERT(info.help && strlen(info.help) > 10);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(t[k].name, t[i].name)) TEST_FAIL_("%s declared twice", t[i].name);
    if (t[i].type == SYMM_SETTING_KIND_INT && !t[i].default_value) ASSERT_GE(t[i].min, 0);
    if (!t[i].default_value) continue;
    unsetenv(t[i].name);
    ASSERT_OK(symm_setting_get(i, &info));
    ASSERT_PTR_EQ(info.value, NULL);
    setenv(t[i].name, t[i].default_value, 1);
    ASSERT_OK(symm_setting_get(i, &info));
    if (info.problem)
      TEST_FAIL_("%s's default %s: %s", info.name, t[i].default_value, info.problem);
    unsetenv(t[i].name);
  }
  for (size_t i = 0; i < n; i++) {
    const char *const *ch = t[i].choices;
    /* Every algorithm but the copy engines reduces; they alone copy. */
    if (!strcmp(t[i].name, "SYMM_ALLREDUCE_ALGO")) {
      for (int k = 0; k < SYMM_ALGO_CE; k++)
        ASSERT(ch[k] && !strcmp(ch[k], symm_algo_name((symm_algo_t)k)));
      ASSERT_PTR_EQ(ch[SYMM_ALGO_CE], NULL);
    }
    if (!strcmp(t[i].name, "SYMM_COPY_ALGO"))
      ASSERT(!strcmp(ch[0], symm_algo_name(SYMM_ALGO_AUTO)) &&
             !strcmp(ch[1], symm_algo_name(SYMM_ALGO_CE)) && !ch[2]);
  }
  symm_settings_t s;
  setenv("SYMM_DEBUG", "trace", 1);
  symm_settings_read(&s);
  ASSERT_EQ(s.SYMM_DEBUG.index, SYMM_LOG_TRACE);
  setenv("SYMM_DEBUG", "none", 1);
  symm_settings_read(&s);
  ASSERT_EQ(s.SYMM_DEBUG.index, SYMM_LOG_NONE);
  unsetenv("SYMM_DEBUG");
  return 0;
}

/* For a bad value, symm_comm_init, symm_setting_get and symmem-info --env
 * give the same verdict, word for word. */
TEST_IMPL(settings_info_agrees_with_init) {
  lone_host_env();
  char *out = malloc(OUT_CAP);
  ASSERT(out != NULL);
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const bad_case_t *c = &bad_cases[i];
    ASSERT_RES(init_with(c->name, c->value), SYMM_ERR_INVALID_ARG);
    char init_error[1024];
    snprintf(init_error, sizeof init_error, "%s", symm_last_error());
    setenv(c->name, c->value, 1);
    const char *problem = NULL;
    for (size_t k = 0; k < symm_setting_count(); k++) {
      symm_setting_info_t info;
      ASSERT_OK(symm_setting_get(k, &info));
      if (!strcmp(info.name, c->name)) problem = info.problem;
    }
    unsetenv(c->name);
    if (!problem) TEST_FAIL_("symm_setting_get finds nothing wrong with %s=%s", c->name, c->value);
    ASSERT_STR_CONTAINS(init_error, problem);
    char cmd[512], want[1024];
    snprintf(cmd, sizeof cmd, "env %s='%s' %s --env", c->name, c->value,
             test_tool_path("symmem-info"));
    test_run_command(cmd, out, OUT_CAP);
    snprintf(want, sizeof want, "current value: %s (%s)\n", c->value, problem);
    ASSERT_STR_CONTAINS(out, want);
  }
  /* Good values: shown without a verdict. */
  char cmd[512];
  snprintf(cmd, sizeof cmd, "env SYMM_POOL_BYTES=64M SYMM_BOOTSTRAP_SHM=off %s --env",
           test_tool_path("symmem-info"));
  ASSERT_EQ(test_run_command(cmd, out, OUT_CAP), 0);
  ASSERT_STR_CONTAINS(out, "current value: 64M\n");
  ASSERT_STR_CONTAINS(out, "current value: off\n");
  free(out);
  return 0;
}
