/* Calls the shim cannot see: system calls made by the `syscall` instruction
 * itself, as a statically linked program, a language runtime or a sandbox makes
 * them. On paths and descriptors of the mount each must fail; none may reach a
 * file of the host.
 *
 *   fault MOUNT HOSTDIR    (run with HOSTDIR as its current directory, which
 *                           holds a file "victim")
 *
 * Prints "NAME: ERRNO" for each call, "NAME: ok" if one succeeded; the test
 * asserts that every line is an error and that HOSTDIR is unchanged.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The `syscall` instruction, not libc's `syscall()` (which the shim routes). */
static long raw(long n, long a, long b, long c, long d) {
    long ret;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return ret;
}

static long raw6(long n, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

static int failures;

static void report(const char *what, long r) {
    if (r >= 0) {
        printf("%s: ok\n", what);
        failures++;
    } else {
        printf("%s: %s\n", what, strerrorname_np((int)-r));
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: fault MOUNT HOSTDIR\n");
        return 2;
    }
    const char *m = argv[1];
    char p[4096];
    /* What the program was started with (besides 0-2) is its own, not the shim's. */
    static char inherited[1024];
    for (int k = 3; k < 1024; k++)
        inherited[k] = fcntl(k, F_GETFD) >= 0;
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* A file of the mount, opened by the shim, then touched behind its back. */
    snprintf(p, sizeof p, "%s/file", m);
    int fd = open(p, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "the image's\n", 12) != 12) {
        perror("open/write through the shim");
        return 2;
    }
    char b[64];
    report("raw openat of a mount path", raw(SYS_openat, AT_FDCWD, (long)p, O_RDONLY, 0));
    report("raw openat O_CREAT of a mount path",
           raw(SYS_openat, AT_FDCWD, (long)p, O_CREAT | O_WRONLY, 0644));
    report("raw read of a mount descriptor", raw(SYS_read, fd, (long)b, sizeof b, 0));
    report("raw write of a mount descriptor", raw(SYS_write, fd, (long)"lost", 4, 0));
    report("raw pwrite64 of a mount descriptor", raw(SYS_pwrite64, fd, (long)"lost", 4, 0));
    report("raw ftruncate of a mount descriptor", raw(SYS_ftruncate, fd, 0, 0, 0));
    report("raw fsync of a mount descriptor", raw(SYS_fsync, fd, 0, 0, 0));
    report("raw mmap shared of a mount descriptor",
           raw6(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    report("raw getdents64 of a mount descriptor", raw(SYS_getdents64, fd, (long)b, sizeof b, 0));
    report("raw fchmod of a mount descriptor", raw(SYS_fchmod, fd, 0777, 0, 0));

    /* After `cd` into the mount, relative calls the shim does not see. */
    snprintf(p, sizeof p, "%s", m);
    if (chdir(p) != 0) {
        perror("chdir into the mount");
        return 2;
    }
    report("raw unlinkat victim (relative)", raw(SYS_unlinkat, AT_FDCWD, (long)"victim", 0, 0));
    report("raw openat victim for writing (relative)",
           raw(SYS_openat, AT_FDCWD, (long)"victim", O_WRONLY | O_TRUNC, 0));
    report("raw openat O_CREAT new (relative)",
           raw(SYS_openat, AT_FDCWD, (long)"new", O_CREAT | O_WRONLY, 0644));
    report("raw mkdirat (relative)", raw(SYS_mkdirat, AT_FDCWD, (long)"newdir", 0755, 0));
    report("raw renameat victim (relative)",
           raw(SYS_renameat, AT_FDCWD, (long)"victim", AT_FDCWD, (long)"moved"));
    report("raw symlinkat (relative)", raw(SYS_symlinkat, (long)"/etc/passwd", AT_FDCWD, (long)"ln", 0));
    report("raw mknodat fifo (relative)", raw(SYS_mknodat, AT_FDCWD, (long)"fifo", S_IFIFO | 0644, 0));
    report("raw fchmodat victim (relative)", raw(SYS_fchmodat, AT_FDCWD, (long)"victim", 0777, 0));
    report("raw truncate victim (relative)", raw(SYS_truncate, (long)"victim", 0, 0, 0));
    report("raw openat of .. (relative)", raw(SYS_openat, AT_FDCWD, (long)"../victim", O_WRONLY, 0));
    report("raw chdir .. then unlink", raw(SYS_chdir, (long)"..", 0, 0, 0) >= 0
                                           ? raw(SYS_unlinkat, AT_FDCWD, (long)"victim", 0, 0)
                                           : -ENOENT);

    /* Every descriptor number the program did not open, through libc: writes,
     * reads, close, dup2 onto it, fcntl. None may reach what the shim holds (the
     * region file, a server's socket and mailbox): each is EBADF. */
    int stray = 0;
    for (int k = 3; k < 1024; k++) {
        if (k == fd || inherited[k])
            continue;
        char junk[8] = "junk!!!\n";
        if (write(k, junk, sizeof junk) >= 0 || errno != EBADF)
            stray++, printf("write to %d: %s\n", k, strerrorname_np(errno));
        if (pwrite(k, junk, sizeof junk, 0) >= 0 || errno != EBADF)
            stray++, printf("pwrite to %d: %s\n", k, strerrorname_np(errno));
        if (read(k, b, 1) >= 0 || errno != EBADF)
            stray++, printf("read of %d: %s\n", k, strerrorname_np(errno));
        if (fcntl(k, F_SETFD, 0) >= 0 || errno != EBADF)
            stray++, printf("fcntl of %d: %s\n", k, strerrorname_np(errno));
        if (dup2(fd, k) >= 0) {
            /* Allowed only onto a free number: then it is the program's own. */
            close(k);
        } else if (errno != EBADF) {
            stray++, printf("dup2 onto %d: %s\n", k, strerrorname_np(errno));
        }
        if (close(k) >= 0 || errno != EBADF)
            stray++, printf("close of %d: %s\n", k, strerrorname_np(errno));
    }
    printf("stray descriptor calls that did not fail: %d\n", stray);
    failures += stray;

    /* The kernel's current directory was not the host's: the shim still serves. */
    snprintf(p, sizeof p, "%s/file", m);
    int again = open(p, O_RDONLY);
    ssize_t n = again < 0 ? -1 : read(again, b, sizeof b - 1);
    b[n > 0 ? n : 0] = 0;
    printf("the mount's file by the shim: %s", n > 0 ? b : "(unreadable)\n");
    printf("%d raw calls succeeded\n", failures);
    return failures == 0 ? 0 : 1;
}
