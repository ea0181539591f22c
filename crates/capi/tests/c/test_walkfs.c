/* Builds against the installed walkfs.h and libwalkfs.so, and checks the
 * C ABI against the kernel: the same calls on a host directory, directly
 * and through walkfs, give the same answers. */
#define _GNU_SOURCE
#include <walkfs.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures, checks;

#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* Every walkfs call below runs inside GUARD: errno is set to a sentinel
 * before and must still hold it after (the header promises no call
 * touches errno). The macros shadow the functions' names; a parenthesized
 * name calls the function itself. */
#define SENTINEL 5150
static int errno_changed;
#define GUARD(call) ({ errno = SENTINEL; __typeof__(call) r_ = (call); \
    if (errno != SENTINEL) { errno_changed++; \
        fprintf(stderr, "FAIL %s:%d: %s changed errno to %d\n", __FILE__, __LINE__, #call, errno); } \
    r_; })
#define walkfs_open(...) GUARD((walkfs_open)(__VA_ARGS__))
#define walkfs_set_option(...) GUARD((walkfs_set_option)(__VA_ARGS__))
#define walkfs_set_creds(...) GUARD((walkfs_set_creds)(__VA_ARGS__))
#define walkfs_faccessat(...) GUARD((walkfs_faccessat)(__VA_ARGS__))
#define walkfs_readlinkat(...) GUARD((walkfs_readlinkat)(__VA_ARGS__))
#define walkfs_statx(...) GUARD((walkfs_statx)(__VA_ARGS__))
#define walkfs_fstatat(...) GUARD((walkfs_fstatat)(__VA_ARGS__))
#define walkfs_fstat(...) GUARD((walkfs_fstat)(__VA_ARGS__))
#define walkfs_openat(...) GUARD((walkfs_openat)(__VA_ARGS__))
#define walkfs_close(...) GUARD((walkfs_close)(__VA_ARGS__))
#define walkfs_read(...) GUARD((walkfs_read)(__VA_ARGS__))
#define walkfs_pread(...) GUARD((walkfs_pread)(__VA_ARGS__))
#define walkfs_write(...) GUARD((walkfs_write)(__VA_ARGS__))
#define walkfs_pwrite(...) GUARD((walkfs_pwrite)(__VA_ARGS__))
#define walkfs_mkdirat(...) GUARD((walkfs_mkdirat)(__VA_ARGS__))
#define walkfs_mknodat(...) GUARD((walkfs_mknodat)(__VA_ARGS__))
#define walkfs_unlinkat(...) GUARD((walkfs_unlinkat)(__VA_ARGS__))
#define walkfs_renameat2(...) GUARD((walkfs_renameat2)(__VA_ARGS__))
#define walkfs_symlinkat(...) GUARD((walkfs_symlinkat)(__VA_ARGS__))
#define walkfs_linkat(...) GUARD((walkfs_linkat)(__VA_ARGS__))
#define walkfs_fchmodat(...) GUARD((walkfs_fchmodat)(__VA_ARGS__))
#define walkfs_fchownat(...) GUARD((walkfs_fchownat)(__VA_ARGS__))
#define walkfs_ftruncate(...) GUARD((walkfs_ftruncate)(__VA_ARGS__))
#define walkfs_close_ctx(w) do { errno = SENTINEL; (walkfs_close_ctx)(w); \
    if (errno != SENTINEL) { errno_changed++; fprintf(stderr, "FAIL: walkfs_close_ctx changed errno\n"); } } while (0)

/* The kernel's answer as walkfs spells it: 0 or -errno. */
static int k(int r) { return r < 0 ? -errno : r; }

int main(void) {
    char dir[] = "/tmp/walkfs-capi-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
    int host = open(dir, O_PATH | O_DIRECTORY);

    walkfs_t *w = walkfs_open(dir, "negtimeout=-1,fastpath=1");
    CHECK(w != NULL, "walkfs_open(%s)", dir);
    if (!w) return 1;
    CHECK(walkfs_open("/nonexistent/dir", NULL) == NULL, "open of a missing dir");
    CHECK(walkfs_set_option(w, "nosuchoption", "1") == -EINVAL, "unknown option");

    /* Build a small tree through walkfs. */
    CHECK(walkfs_mkdirat(w, AT_FDCWD, "/usr", 0755) == 0, "mkdir /usr");
    CHECK(walkfs_mkdirat(w, AT_FDCWD, "/usr/lib", 0755) == 0, "mkdir /usr/lib");
    CHECK(walkfs_symlinkat(w, "usr/lib", AT_FDCWD, "/lib") == 0, "symlink /lib");
    int fd = walkfs_openat(w, AT_FDCWD, "/usr/lib/crtendS.o", O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0, "create: %d", fd);
    CHECK(walkfs_write(w, fd, "elf!", 4) == 4, "write");
    char buf[64] = {0};
    CHECK(walkfs_pread(w, fd, buf, sizeof buf, 0) == 4 && memcmp(buf, "elf!", 4) == 0, "pread");
    struct stat st;
    CHECK(walkfs_fstat(w, fd, &st) == 0 && st.st_size == 4, "fstat size %ld", (long)st.st_size);
    struct statx sx;
    CHECK(walkfs_statx(w, fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx) == 0 && sx.stx_size == 4, "statx(fd)");
    CHECK(walkfs_close(w, fd) == 0, "close");
    CHECK(walkfs_close(w, fd) == -EBADF, "double close");

    /* The same questions to the kernel and to walkfs. */
    const char *paths[] = {"lib/crtendS.o", "usr/lib/../lib/crtendS.o", "lib/missing", "usr/lib/crtendS.o/",
                           "lib", "lib/", "usr/nothing/x", "usr/lib/crtendS.o/x"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        char abs[256];
        snprintf(abs, sizeof abs, "/%s", paths[i]);
        for (int mode = 0; mode <= 7; mode++) {
            int kr = k(faccessat(host, paths[i], mode, 0));
            int wr = walkfs_faccessat(w, AT_FDCWD, abs, mode, 0);
            CHECK(kr == wr, "access(%s, %d): kernel %d walkfs %d", paths[i], mode, kr, wr);
        }
        struct stat ks, ws;
        int kr = k(fstatat(host, paths[i], &ks, AT_SYMLINK_NOFOLLOW));
        int wr = walkfs_fstatat(w, AT_FDCWD, abs, &ws, AT_SYMLINK_NOFOLLOW);
        CHECK(kr == wr, "lstat(%s): kernel %d walkfs %d", paths[i], kr, wr);
        if (kr == 0 && wr == 0)
            CHECK(ks.st_mode == ws.st_mode && ks.st_size == ws.st_size && ks.st_nlink == ws.st_nlink,
                  "lstat(%s) fields differ", paths[i]);
    }
    char kb[64] = {0}, wb[64] = {0};
    ssize_t kn = readlinkat(host, "lib", kb, sizeof kb);
    ssize_t wn = walkfs_readlinkat(w, AT_FDCWD, "/lib", wb, sizeof wb);
    CHECK(kn == wn && memcmp(kb, wb, (size_t)kn) == 0, "readlink: kernel %zd walkfs %zd", kn, wn);
    CHECK(walkfs_readlinkat(w, AT_FDCWD, "/lib", wb, 3) == 3, "readlink truncates");
    CHECK(walkfs_readlinkat(w, AT_FDCWD, "/usr", wb, sizeof wb) == -EINVAL, "readlink of a dir");

    /* readlinkat with an empty path reads the descriptor itself: a link
     * only for a symlink opened O_PATH|O_NOFOLLOW, ENOENT for anything
     * else (AT_FDCWD, directories and files, O_RDONLY or O_PATH). */
    struct { const char *path; int flags; } fds[] = {
        {"usr", O_RDONLY | O_DIRECTORY}, {"usr", O_PATH}, {"usr/lib/crtendS.o", O_RDONLY},
        {"usr/lib/crtendS.o", O_PATH}, {"lib", O_PATH | O_NOFOLLOW}, {"lib", O_RDONLY},
    };
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++) {
        char abs[256];
        snprintf(abs, sizeof abs, "/%s", fds[i].path);
        int kfd = openat(host, fds[i].path, fds[i].flags);
        int wfd = walkfs_openat(w, AT_FDCWD, abs, fds[i].flags, 0);
        CHECK(kfd >= 0 && wfd >= 0, "open %s (%#x): kernel %d walkfs %d", fds[i].path, fds[i].flags, kfd, wfd);
        memset(kb, 0, sizeof kb);
        memset(wb, 0, sizeof wb);
        int kr = k((int)readlinkat(kfd, "", kb, sizeof kb));
        int wr = (int)walkfs_readlinkat(w, wfd, "", wb, sizeof wb);
        CHECK(kr == wr && memcmp(kb, wb, sizeof kb) == 0, "readlinkat(%s %#x, \"\"): kernel %d walkfs %d",
              fds[i].path, fds[i].flags, kr, wr);
        close(kfd);
        walkfs_close(w, wfd);
    }
    {
        int cwd = open(".", O_PATH | O_DIRECTORY);
        CHECK(fchdir(host) == 0, "chdir");
        int kr = k((int)readlinkat(AT_FDCWD, "", kb, sizeof kb));
        int wr = (int)walkfs_readlinkat(w, AT_FDCWD, "", wb, sizeof wb);
        CHECK(kr == wr, "readlinkat(AT_FDCWD, \"\"): kernel %d walkfs %d", kr, wr);
        CHECK(fchdir(cwd) == 0, "chdir back");
        close(cwd);
    }

    /* Special files: made, never opened through walkfs. */
    CHECK(walkfs_mknodat(w, AT_FDCWD, "/fifo", S_IFIFO | 0640, 0) == 0, "mkfifo");
    CHECK(fstatat(host, "fifo", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISFIFO(st.st_mode) && (st.st_mode & 0777) == 0640,
          "the fifo reached the host");
    CHECK(walkfs_openat(w, AT_FDCWD, "/fifo", O_RDONLY | O_NONBLOCK, 0) < 0, "a fifo is not opened by walkfs");
    CHECK(walkfs_mknodat(w, AT_FDCWD, "/fifo", S_IFIFO | 0640, 0) == -EEXIST, "mkfifo over a fifo");
    CHECK(walkfs_mknodat(w, AT_FDCWD, "/d", S_IFDIR | 0755, 0) == -EPERM, "mknod of a directory");
    CHECK(walkfs_unlinkat(w, AT_FDCWD, "/fifo", 0) == 0, "unlink the fifo");

    /* Renames, links, chmod, unlink. */
    CHECK(walkfs_linkat(w, AT_FDCWD, "/usr/lib/crtendS.o", AT_FDCWD, "/hard", 0) == 0, "link");
    CHECK(walkfs_fstatat(w, AT_FDCWD, "/hard", &st, 0) == 0 && st.st_nlink == 2, "nlink 2");
    CHECK(walkfs_renameat2(w, AT_FDCWD, "/hard", AT_FDCWD, "/usr/lib/crtendS.o", RENAME_NOREPLACE) == -EEXIST, "noreplace");
    CHECK(walkfs_renameat2(w, AT_FDCWD, "/hard", AT_FDCWD, "/moved", 0) == 0, "rename");
    CHECK(walkfs_fchmodat(w, AT_FDCWD, "/moved", 0600, 0) == 0, "chmod");
    CHECK(fstatat(host, "moved", &st, 0) == 0 && (st.st_mode & 07777) == 0600, "chmod reached the host");
    CHECK(walkfs_unlinkat(w, AT_FDCWD, "/moved", 0) == 0, "unlink");
    CHECK(faccessat(host, "moved", F_OK, 0) < 0 && errno == ENOENT, "unlink reached the host");
    CHECK(walkfs_unlinkat(w, AT_FDCWD, "/usr", AT_REMOVEDIR) == -ENOTEMPTY, "rmdir non-empty");

    /* Credentials: an unprivileged caller. */
    CHECK(walkfs_mkdirat(w, AT_FDCWD, "/private", 0700) == 0, "mkdir private");
    gid_t groups[] = {4242};
    CHECK(walkfs_set_creds(w, 1000, 1000, 1, groups) == 0, "set_creds");
    CHECK(walkfs_faccessat(w, AT_FDCWD, "/private/x", F_OK, 0) == -EACCES, "EACCES in the middle");
    CHECK(walkfs_mkdirat(w, AT_FDCWD, "/mine", 0755) == -EACCES, "no write on root");
    CHECK(walkfs_set_creds(w, 0, 0, 0, NULL) == 0, "back to root");
    CHECK(walkfs_fchmodat(w, AT_FDCWD, "/", 0777, 0) == 0, "chmod root 0777");
    CHECK(walkfs_set_creds(w, 1000, 1000, 0, NULL) == 0, "user again");
    CHECK(walkfs_mkdirat(w, AT_FDCWD, "/mine", 0755) == 0, "mkdir as user");
    CHECK(fstatat(host, "mine", &st, 0) == 0 && st.st_uid == 1000 && st.st_gid == 1000,
          "owner of what the user created: %u:%u", st.st_uid, st.st_gid);

    /* Escapes: ".." and absolute symlinks stay inside the source. */
    CHECK(walkfs_symlinkat(w, "/../../../../etc", AT_FDCWD, "/mine/esc") == 0, "symlink out");
    CHECK(walkfs_faccessat(w, AT_FDCWD, "/mine/esc/passwd", F_OK, 0) == -ENOENT, "escape stays inside");
    CHECK(walkfs_faccessat(w, AT_FDCWD, "/../../../etc/passwd", F_OK, 0) == -ENOENT, "dotdot stays inside");

    walkfs_close_ctx(w);

    walkfs_t *m = walkfs_open("mem:", NULL);
    CHECK(m && walkfs_mkdirat(m, AT_FDCWD, "/x", 0755) == 0, "mem: works");
    walkfs_close_ctx(m);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    CHECK(errno_changed == 0, "%d calls changed errno", errno_changed);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
