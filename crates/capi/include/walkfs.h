/* walkfs.h: the C ABI of walkfs, Linux's path lookup as a library.
 *
 * Every call returns a negative errno on failure (never setting errno).
 * Descriptors are walkfs's own, valid only with the walkfs_t they came from.
 * Paths resolve with the context's root as "/": absolute paths and absolute
 * symlink targets start at the root of the source, ".." at the root stays
 * there. dirfd takes AT_FDCWD (the root) or a walkfs directory descriptor;
 * flags are the kernel's (AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH, O_*, ...).
 *
 * Link with: pkg-config --cflags --libs walkfs
 */
#ifndef WALKFS_H
#define WALKFS_H

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct walkfs walkfs_t;

/* source: a host directory, or "mem:" for an empty in-memory tree.
 * options: "negtimeout=-1,fastpath=1,fastperm=1,cache_symlinks=1,umask=022,
 * max_dentries=N,ro=0", or NULL for the defaults (every optimization on,
 * negative entries kept until evicted, no umask). NULL on error. The
 * context starts with the calling process's effective ids. */
walkfs_t *walkfs_open(const char *source, const char *options);
void     walkfs_close_ctx(walkfs_t *);
/* Any option above at run time, or "beneath"=1 for RESOLVE_BENEATH walks.
 * Unknown names: -EINVAL. */
int      walkfs_set_option(walkfs_t *, const char *name, const char *value);
/* Ids for permission checks and for the owner of what is created. */
int      walkfs_set_creds(walkfs_t *, uid_t uid, gid_t gid, int ngroups, const gid_t *groups);

int      walkfs_faccessat(walkfs_t *, int dirfd, const char *path, int mode, int flags);
ssize_t  walkfs_readlinkat(walkfs_t *, int dirfd, const char *path, char *buf, size_t len);
int      walkfs_statx(walkfs_t *, int dirfd, const char *path, int flags, unsigned int mask, struct statx *out);
int      walkfs_fstatat(walkfs_t *, int dirfd, const char *path, struct stat *out, int flags);
int      walkfs_fstat(walkfs_t *, int fd, struct stat *out);
int      walkfs_openat(walkfs_t *, int dirfd, const char *path, int flags, mode_t mode);
int      walkfs_close(walkfs_t *, int fd);
ssize_t  walkfs_read(walkfs_t *, int fd, void *buf, size_t n);
ssize_t  walkfs_pread(walkfs_t *, int fd, void *buf, size_t n, off_t off);
ssize_t  walkfs_write(walkfs_t *, int fd, const void *buf, size_t n);
ssize_t  walkfs_pwrite(walkfs_t *, int fd, const void *buf, size_t n, off_t off);
int      walkfs_mkdirat(walkfs_t *, int dirfd, const char *path, mode_t mode);
int      walkfs_unlinkat(walkfs_t *, int dirfd, const char *path, int flags);
int      walkfs_renameat2(walkfs_t *, int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);
int      walkfs_symlinkat(walkfs_t *, const char *target, int newdirfd, const char *linkpath);
/* Fifos, sockets, device nodes (needs uid 0) and empty regular files; walkfs
 * never opens the special ones. */
int      walkfs_mknodat(walkfs_t *, int dirfd, const char *path, mode_t mode, dev_t dev);
int      walkfs_linkat(walkfs_t *, int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags);
int      walkfs_fchmodat(walkfs_t *, int dirfd, const char *path, mode_t mode, int flags);
int      walkfs_fchownat(walkfs_t *, int dirfd, const char *path, uid_t uid, gid_t gid, int flags);
int      walkfs_ftruncate(walkfs_t *, int fd, off_t len);

#ifdef __cplusplus
}
#endif
#endif
