/* Descriptor semantics, printed line by line so that a run on the mount (under
 * the shim) can be compared with a run on a kernel file system (without it):
 * numbers dup/dup2/dup3/F_DUPFD give, shared offsets, close-on-exec flags,
 * descriptors 0-2 moved onto files and back, what a child keeps across fork and
 * exec, and posix_spawn's file actions.
 *
 *   fds DIR            the checks, in directory DIR
 *   fds child N...     (run by the checks) each descriptor N: open or not, its
 *                      close-on-exec flag, and what it reads from offset 0
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char dir[4096];

static const char *path(const char *name) {
    static char buf[8][4200];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", dir, name);
    return b;
}

static const char *err(long r) {
    static char b[64];
    if (r >= 0) {
        snprintf(b, sizeof b, "%ld", r);
        return b;
    }
    snprintf(b, sizeof b, "-1 %s", strerrorname_np(errno));
    return b;
}

#define SHOW(what, expr)                                                      \
    do {                                                                      \
        errno = 0;                                                            \
        long r_ = (long)(expr);                                               \
        printf("%-40s %s\n", what, err(r_));                                  \
    } while (0)

/* The contents of a file by a fresh descriptor, on one line. */
static void contents(const char *name) {
    char b[1024] = {0};
    int fd = open(path(name), O_RDONLY);
    if (fd < 0) {
        printf("%-40s %s\n", name, err(-1));
        return;
    }
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    for (ssize_t i = 0; i < n; i++)
        if (b[i] == '\n')
            b[i] = '|';
    printf("%-40s [%s]\n", name, n >= 0 ? b : "?");
}

static void child(int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        int fd = atoi(argv[i]);
        char what[64], b[64] = {0};
        errno = 0;
        int fl = fcntl(fd, F_GETFD);
        snprintf(what, sizeof what, "child fd %d flags", fd);
        printf("%-40s %s\n", what, err(fl));
        if (fl < 0)
            continue;
        ssize_t n = pread(fd, b, sizeof b - 1, 0);
        snprintf(what, sizeof what, "child fd %d reads", fd);
        printf("%-40s %s [%s]\n", what, err(n), n > 0 ? b : "");
        snprintf(what, sizeof what, "child fd %d offset", fd);
        printf("%-40s %s\n", what, err(lseek(fd, 0, SEEK_CUR)));
    }
    fflush(stdout);
}

static void wait_for(pid_t pid) {
    int st = 0;
    waitpid(pid, &st, 0);
    printf("%-40s %d\n", "child status", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        child(argc, argv);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: fds DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    char b[64] = {0};

    /* Numbers: the lowest free, F_DUPFD's floor, dup2 onto a chosen one. */
    int fd = open(path("a"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    SHOW("open a", fd);
    SHOW("write hello", write(fd, "hello", 5));
    int d1 = dup(fd);
    SHOW("dup", d1);
    SHOW("dup shares the offset", lseek(d1, 0, SEEK_CUR));
    SHOW("write by the dup", write(d1, "X", 1));
    SHOW("offset of the first", lseek(fd, 0, SEEK_CUR));
    SHOW("F_DUPFD 100", fcntl(fd, F_DUPFD, 100));
    SHOW("F_DUPFD 100 again", fcntl(fd, F_DUPFD, 100));
    SHOW("F_DUPFD_CLOEXEC 200", fcntl(fd, F_DUPFD_CLOEXEC, 200));
    SHOW("F_GETFD of 100", fcntl(100, F_GETFD));
    SHOW("F_GETFD of 200", fcntl(200, F_GETFD));
    SHOW("dup2 onto 50", dup2(fd, 50));
    SHOW("F_GETFD of 50", fcntl(50, F_GETFD));
    SHOW("dup3 onto 51 cloexec", dup3(fd, 51, O_CLOEXEC));
    SHOW("F_GETFD of 51", fcntl(51, F_GETFD));
    SHOW("dup2 onto itself", dup2(fd, fd));
    SHOW("dup3 onto itself", dup3(fd, fd, 0));
    SHOW("dup3 bad flag", dup3(fd, 52, O_APPEND));
    SHOW("dup2 onto -1", dup2(fd, -1));
    SHOW("dup2 of a closed one", dup2(77, 78));
    SHOW("F_SETFD cloexec on 50", fcntl(50, F_SETFD, FD_CLOEXEC));
    SHOW("F_GETFD of 50", fcntl(50, F_GETFD));
    SHOW("F_SETFD off on 50", fcntl(50, F_SETFD, 0));
    SHOW("F_GETFD of 50", fcntl(50, F_GETFD));
    SHOW("close 101 (not open)", close(101));
    SHOW("close 100", close(100));
    SHOW("close 100 again", close(100));
    SHOW("read of a closed one", read(100, b, 1));
    SHOW("write of a closed one", write(100, "z", 1));
    SHOW("dup of a closed one", dup(100));
    SHOW("next open takes 100?", open(path("a"), O_RDONLY) >= 100);
    int ap = open(path("a"), O_WRONLY | O_APPEND);
    SHOW("open append", ap);
    SHOW("F_GETFL append", fcntl(ap, F_GETFL) & (O_ACCMODE | O_APPEND));
    SHOW("dup keeps append", fcntl(dup(ap), F_GETFL) & (O_ACCMODE | O_APPEND));
    /* (F_SETFL cannot take O_APPEND away on the mount: docs/PRELOAD.md.) */
    SHOW("F_SETFL nonblock", fcntl(ap, F_SETFL, O_APPEND | O_NONBLOCK));
    SHOW("F_GETFL", fcntl(ap, F_GETFL) & (O_ACCMODE | O_APPEND | O_NONBLOCK));
    contents("a");

    /* Descriptors 0-2 onto files and back. */
    fflush(stdout);
    int saved1 = dup(1);
    int out = open(path("out"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    SHOW("open out", out);
    fflush(stdout);
    dup2(out, 1);
    printf("by printf\n");
    fflush(stdout);
    write(1, "by write\n", 9);
    puts("by puts");
    fflush(stdout);
    dup2(saved1, 1);
    close(saved1);
    close(out);
    contents("out");

    int in = open(path("in"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(in, "line1\nline2\nline3\n", 18);
    lseek(in, 0, SEEK_SET);
    int saved0 = dup(0);
    dup2(in, 0);
    close(in);
    char line[64] = {0};
    SHOW("fgets of stdin", fgets(line, sizeof line, stdin) != NULL);
    printf("%-40s %s", "stdin said", line);
    int rest = read(0, b, sizeof b - 1);
    /* stdio read ahead: what is left depends on its buffer, as on the kernel. */
    SHOW("read 0 after fgets", rest);
    dup2(saved0, 0);
    close(saved0);
    clearerr(stdin);

    int saved2 = dup(2);
    int er = open(path("err"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(er, 2);
    close(er);
    fprintf(stderr, "to stderr\n");
    perror("perror");
    dup2(saved2, 2);
    close(saved2);
    contents("err");

    /* Fork: shared offsets and descriptors. */
    int sh = open(path("shared"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(sh, "parent.", 7);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        write(sh, "child.", 6);
        _exit(0);
    }
    wait_for(pid);
    SHOW("offset after the child wrote", lseek(sh, 0, SEEK_CUR));
    write(sh, "parent-again", 12);
    contents("shared");

    /* Exec: what stays open (20), what closes (21, 22 by F_SETFD), a moved 0. */
    int keep = open(path("a"), O_RDONLY);
    dup2(keep, 20);
    lseek(20, 2, SEEK_SET);
    dup3(keep, 21, O_CLOEXEC);
    dup2(keep, 22);
    fcntl(22, F_SETFD, FD_CLOEXEC);
    close(keep);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        char *args[] = {argv[0], "child", "20", "21", "22", "23", NULL};
        execve("/proc/self/exe", args, environ);
        _exit(127);
    }
    wait_for(pid);

    /* posix_spawn with file actions: open onto 30, dup2 20 onto 31 and the file
     * "spawned" onto 1, close 20. */
    int so = open(path("spawned"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 30, path("a"), O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 20, 31);
    posix_spawn_file_actions_adddup2(&fa, so, 1);
    posix_spawn_file_actions_addclose(&fa, 20);
    char *sargs[] = {argv[0], "child", "20", "30", "31", NULL};
    fflush(stdout);
    int r = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, sargs, environ);
    SHOW("posix_spawn", r);
    if (r == 0)
        wait_for(pid);
    posix_spawn_file_actions_destroy(&fa);
    close(so);
    contents("spawned");
    SHOW("parent's 20 after the spawn", fcntl(20, F_GETFD));
    SHOW("parent's 20 offset", lseek(20, 0, SEEK_CUR));
    return 0;
}
