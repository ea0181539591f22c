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
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
