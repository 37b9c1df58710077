/* A fault-injecting layer under a process's file system calls, for tests/test_l2_faults.py.
 *
 * Loaded with LD_PRELOAD into the process that runs LMCache's own code, so the faults reach LMCache and aiofiles
 * exactly as a failing L2 mount would deliver them: as errors or stalls of the system calls, with no Python patched.
 * The rules are re-read from the file named by FAULTFS_RULES on every call, so a test can change them between an
 * LMCache lookup and the load. One rule per line, "<mode> <path>":
 *   eio    <path>  open succeeds, every read of the file fails with EIO (Curvine: all replicas of a block lost)
 *   gone   <path>  stat still finds the file, open fails with ENOENT (deleted between the check and the read)
 *   hang   <path>  stat and open of the file block for FAULTFS_HANG_SECONDS (default 600): a hung mount
 *   stall  <path>  every read of the open file blocks for FAULTFS_HANG_SECONDS, then succeeds: a stalled read
 * With FAULTFS_NOATIME set, every read-only open gets O_NOATIME: reads never change a file's access time, as on a
 * FUSE mount (Linux marks FUSE inodes S_NOATIME), so only an explicit utime does.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FDS 4096
static volatile char fd_rule[MAX_FDS]; /* 'e' (eio) or 's' (stall) for an open file, else 0 */

/* The rule for path: the first letter of its mode, 'e' (eio), 'g' (gone), 'h' (hang), 's' (stall), or 0. */
static char rule_for(const char *path) {
    const char *rules = getenv("FAULTFS_RULES");
    if (rules == NULL || path == NULL) return 0;
    FILE *f = fopen(rules, "re");
    if (f == NULL) return 0;
    char line[4096], mode[16], rule_path[4000];
    char found = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "%15s %3999s", mode, rule_path) == 2 && strcmp(rule_path, path) == 0) {
            found = mode[0];
            break;
        }
    }
    fclose(f);
    return found;
}

static void stall(void) {
    const char *seconds = getenv("FAULTFS_HANG_SECONDS");
    sleep(seconds ? (unsigned)atoi(seconds) : 600);
}

#define NEXT(name) static __typeof__(name) *next_##name; if (!next_##name) next_##name = dlsym(RTLD_NEXT, #name)

static int after_open(int fd, char rule) {
    if (fd >= 0 && fd < MAX_FDS) fd_rule[fd] = (rule == 'e' || rule == 's') ? rule : 0;
    return fd;
}

static int before_open(const char *path) {
    char rule = rule_for(path);
    if (rule == 'h') stall();
    if (rule == 'g') { errno = ENOENT; return -1; }
    return rule;
}

/* FUSE semantics for the access time (see above); the caller owns the files, as O_NOATIME requires. */
static int noatime(int flags) {
    if (getenv("FAULTFS_NOATIME") != NULL && (flags & O_ACCMODE) == O_RDONLY) return flags | O_NOATIME;
    return flags;
}

int open64(const char *path, int flags, ...) {
    NEXT(open64);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }
    int rule = before_open(path);
    if (rule < 0) return -1;
    return after_open(next_open64(path, noatime(flags), mode), (char)rule);
}

int open(const char *path, int flags, ...) {
    NEXT(open);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }
    int rule = before_open(path);
    if (rule < 0) return -1;
    return after_open(next_open(path, noatime(flags), mode), (char)rule);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    NEXT(openat64);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }
    int rule = before_open(path);
    if (rule < 0) return -1;
    return after_open(next_openat64(dirfd, path, noatime(flags), mode), (char)rule);
}

int openat(int dirfd, const char *path, int flags, ...) {
    NEXT(openat);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); }
    int rule = before_open(path);
    if (rule < 0) return -1;
    return after_open(next_openat(dirfd, path, noatime(flags), mode), (char)rule);
}

int close(int fd) {
    NEXT(close);
    if (fd >= 0 && fd < MAX_FDS) fd_rule[fd] = 0;
    return next_close(fd);
}

/* Whether a read of fd fails (after stalling it, for a stalled file). */
static int failing(int fd) {
    if (fd < 0 || fd >= MAX_FDS) return 0;
    if (fd_rule[fd] == 's') stall();
    return fd_rule[fd] == 'e';
}

ssize_t read(int fd, void *buf, size_t count) {
    NEXT(read);
    if (failing(fd)) { errno = EIO; return -1; }
    return next_read(fd, buf, count);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    NEXT(pread64);
    if (failing(fd)) { errno = EIO; return -1; }
    return next_pread64(fd, buf, count, offset);
}

ssize_t readv(int fd, const struct iovec *iov, int iovcnt) {
    NEXT(readv);
    if (failing(fd)) { errno = EIO; return -1; }
    return next_readv(fd, iov, iovcnt);
}

static void stall_if_hung(const char *path) { if (rule_for(path) == 'h') stall(); }

int stat64(const char *path, struct stat64 *buf) { NEXT(stat64); stall_if_hung(path); return next_stat64(path, buf); }
int lstat64(const char *path, struct stat64 *buf) { NEXT(lstat64); stall_if_hung(path); return next_lstat64(path, buf); }
int fstatat64(int dirfd, const char *path, struct stat64 *buf, int flags) {
    NEXT(fstatat64);
    stall_if_hung(path);
    return next_fstatat64(dirfd, path, buf, flags);
}
