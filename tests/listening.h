/* How many listening TCP sockets this process holds: its fds' socket
 * inodes looked up in /proc/self/net/tcp and tcp6 (state 0A).  Header-only
 * for the test programs that link nothing of the test harness. */
#ifndef SYMM_TEST_LISTENING_H
#define SYMM_TEST_LISTENING_H

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

static bool symm_test_listens_in(const char *file, unsigned long ino) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/self/net/%s", file);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    unsigned st;
    unsigned long inode;
    /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
    if (sscanf(line, "%*s %*s %*s %x %*s %*s %*s %*s %*s %lu", &st, &inode) == 2)
      found = st == 0x0A && inode == ino;
  }
  fclose(f);
  return found;
}

/* -1 when /proc/self/fd cannot be read. */
static int symm_test_listening_sockets(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = 0;
    unsigned long ino;
    if (sscanf(target, "socket:[%lu]", &ino) == 1)
      n += symm_test_listens_in("tcp", ino) || symm_test_listens_in("tcp6", ino);
  }
  closedir(d);
  return n;
}

#endif /* SYMM_TEST_LISTENING_H */
