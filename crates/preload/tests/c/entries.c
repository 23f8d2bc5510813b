/* entries.c: the libc entries the shim serves beside its first ones -- mkstemp and
 * its family, glob, scandir, ftw/nftw, execl/execle/execlp, dprintf, syscall, the
 * mknod family -- run twice in one process under the shim: under the mount prefix
 * (easyio) and in a tmpfs directory (the kernel, the shim passing the calls on),
 * logging each result, errno and what was read back; the two logs must be equal
 * line by line. Exit status 0 only if they are and the checks of the mount alone
 * (a relative raw unlinkat removing the mount's file, not the host's) hold.
 *
 *   entries EASYIO_ROOT KERNEL_ROOT HOST_DIR   (HOST_DIR: the kernel's current
 *                                               directory, holding a file "victim")
 *   entries child WHAT OUT ARGS...             (run by the exec tests)
 *   entries handover FD                        (run by the hand-over test)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern int __dprintf_chk(int fd, int flag, const char *fmt, ...);
extern int __xmknod(int ver, const char *path, mode_t mode, dev_t *dev);
extern int __xmknodat(int ver, int dirfd, const char *path, mode_t mode, dev_t *dev);

#define MAXLOG (1 << 14)
#define LINE 200
static char logs[2][MAXLOG][LINE];
static int nlog[2];
static int side;
static const char *root;
static const char *self_exe;
static const char *host_dir;
static int failures;

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (nlog[side] < MAXLOG)
        vsnprintf(logs[side][nlog[side]++], LINE, fmt, ap);
    va_end(ap);
}

/* A check of the mount alone: fails the run, not the comparison. */
static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "check failed: %s (errno %d)\n", what, errno);
        failures++;
    }
}

/* Logs a call's result, and errno when it failed. */
#define CHECK(expr)                                                              \
    do {                                                                         \
        errno = 0;                                                               \
        long r_ = (long)(expr);                                                  \
        say("%d %s = %ld errno %d", __LINE__, #expr, r_, r_ < 0 ? errno : 0);    \
    } while (0)

static char pbuf[8][PATH_MAX];
static int pnext;
/* root/rel, in one of a few rotating buffers. */
static const char *P(const char *rel) {
    char *b = pbuf[pnext++ % 8];
    snprintf(b, PATH_MAX, "%s/%s", root, rel);
    return b;
}

/* `p` without the root in front (for paths the calls give back). */
static const char *rel(const char *p) {
    size_t n = strlen(root);
    if (strncmp(p, root, n) == 0)
        return p[n] == '/' ? p + n + 1 : p + n;
    return p;
}

static void stat_line(const char *what, const char *path, int follow) {
    struct stat st;
    errno = 0;
    int r = follow ? stat(path, &st) : lstat(path, &st);
    if (r < 0)
        say("%s: errno %d", what, errno);
    else
        say("%s: mode %o size %lld", what, st.st_mode,
            S_ISDIR(st.st_mode) ? 0LL : (long long)st.st_size);
}

static void put_file(const char *path, const char *text) {
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t n = write(fd, text, strlen(text));
        (void)n;
        close(fd);
    }
}

static void read_file(const char *what, const char *path) {
    char buf[256] = {0};
    int fd = open(path, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    say("%s: %zd [%s]", what, n, n > 0 ? buf : "");
}

/* ---- sorted blocks: lines whose order the directory decides ---------------- */

static char block[4096][LINE];
static int nblock;

static void add(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (nblock < 4096)
        vsnprintf(block[nblock++], LINE, fmt, ap);
    va_end(ap);
}

static int by_string(const void *a, const void *b) { return strcmp(a, b); }

static void flush_sorted(const char *what) {
    qsort(block, nblock, LINE, by_string);
    say("%s: %d lines", what, nblock);
    for (int i = 0; i < nblock; i++)
        say("  %s", block[i]);
    nblock = 0;
}

/* ---- mkstemp and family ----------------------------------------------------- */

static const char *LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/* Whether `t` is `before` + six letters + `after` (the template filled). */
static int filled(const char *t, const char *before, const char *after) {
    size_t b = strlen(before), a = strlen(after);
    if (strlen(t) != b + 6 + a || strncmp(t, before, b) != 0 || strcmp(t + b + 6, after) != 0)
        return 0;
    int xs = 0;
    for (int i = 0; i < 6; i++) {
        if (!strchr(LETTERS, t[b + i]))
            return 0;
        xs += t[b + i] == 'X';
    }
    return xs < 6;
}

/* A file made from a template: its name filled, its mode, its flags, and data
 * written through the descriptor read back by name. */
static void made_file(const char *what, int fd, char *t, const char *before, const char *after) {
    struct stat st;
    say("%s: fd ok %d name filled %d", what, fd >= 0, filled(t, before, after));
    if (fd < 0)
        return;
    fstat(fd, &st);
    say("%s: mode %o size %lld", what, st.st_mode, (long long)st.st_size);
    say("%s: getfl %o getfd %d", what, fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND),
        fcntl(fd, F_GETFD));
    CHECK(write(fd, "temp", 4));
    close(fd);
    read_file(what, t);
    CHECK(unlink(t));
}

static void temps(void) {
    char t[PATH_MAX];
    mkdir(P("tmp"), 0755);
#define TEMPLATE(s) (snprintf(t, sizeof t, "%s/tmp/" s, root), t)
    made_file("mkstemp", mkstemp(TEMPLATE("aXXXXXX")), t, P("tmp/a"), "");
    made_file("mkstemp64", mkstemp64(TEMPLATE("bXXXXXX")), t, P("tmp/b"), "");
    made_file("mkostemp", mkostemp(TEMPLATE("cXXXXXX"), O_CLOEXEC | O_APPEND), t, P("tmp/c"), "");
    made_file("mkostemp64", mkostemp64(TEMPLATE("dXXXXXX"), O_CLOEXEC), t, P("tmp/d"), "");
    made_file("mkstemps", mkstemps(TEMPLATE("eXXXXXX.txt"), 4), t, P("tmp/e"), ".txt");
    made_file("mkstemps64", mkstemps64(TEMPLATE("fXXXXXX.c"), 2), t, P("tmp/f"), ".c");
    made_file("mkostemps", mkostemps(TEMPLATE("gXXXXXX.o"), 2, O_APPEND), t, P("tmp/g"), ".o");
    made_file("mkostemps64", mkostemps64(TEMPLATE("hXXXXXX-z"), 2, O_CLOEXEC), t, P("tmp/h"), "-z");
    /* A directory: the template itself returned, mode 0700. */
    char *d = mkdtemp(TEMPLATE("dirXXXXXX"));
    say("mkdtemp: same %d filled %d", d == t, filled(t, P("tmp/dir"), ""));
    stat_line("mkdtemp", t, 1);
    CHECK(rmdir(t));
    /* mktemp: a name nothing has, nothing made. */
    d = mktemp(TEMPLATE("nameXXXXXX"));
    say("mktemp: same %d filled %d", d == t, filled(t, P("tmp/name"), ""));
    stat_line("mktemp", t, 0);
    /* Bad templates. */
    CHECK(mkstemp(TEMPLATE("shortXXXXX")));
    say("unchanged %d", strcmp(t, P("tmp/shortXXXXX")) == 0);
    CHECK(mkstemps(TEMPLATE("sXXXXXX.txt"), 5));
    CHECK(mkstemps(TEMPLATE("sXXXXXX.txt"), -1));
    CHECK(mkostemps(TEMPLATE("XXXXXX"), 1, 0));
    errno = 0;
    d = mkdtemp(TEMPLATE("dXXXX"));
    say("mkdtemp bad: %d errno %d", d == NULL, errno);
    errno = 0;
    d = mktemp(TEMPLATE("mXXXX"));
    say("mktemp bad: %d [%s] errno %d", d == t, t, errno);
    CHECK(mkstemp(TEMPLATE("../missing/xXXXXXX")));
    errno = 0;
    d = mkdtemp(TEMPLATE("../missing/dXXXXXX"));
    say("mkdtemp missing: %d errno %d", d == NULL, errno);
    /* Many in one directory: every name different. */
    mkdir(P("many"), 0755);
    int made = 0;
    for (int i = 0; i < 200; i++) {
        snprintf(t, sizeof t, "%s/many/mXXXXXX", root);
        int fd = mkstemp(t);
        if (fd >= 0) {
            made++;
            close(fd);
        }
    }
    struct dirent **list;
    int n = scandir(P("many"), &list, NULL, alphasort);
    int distinct = n;
    for (int i = 0; i < n; i++) {
        if (i > 0 && strcmp(list[i]->d_name, list[i - 1]->d_name) == 0)
            distinct--;
        if (list[i]->d_name[0] != '.') {
            snprintf(t, sizeof t, "%s/many/%s", root, list[i]->d_name);
            unlink(t);
        }
        free(list[i]);
    }
    if (n >= 0)
        free(list);
    say("many: made %d listed %d distinct %d", made, n, distinct);
#undef TEMPLATE
}

/* ---- glob ------------------------------------------------------------------- */

static void globbed(const char *what, const char *pattern, int flags) {
    glob_t g;
    memset(&g, 0, sizeof g);
    errno = 0;
    int r = glob(pattern, flags, NULL, &g);
    say("%s: glob = %d count %zu flags %x", what, r, g.gl_pathc, g.gl_flags);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (flags & GLOB_NOSORT)
            add("%s", rel(g.gl_pathv[i]));
        else
            say("  %s", rel(g.gl_pathv[i]));
    }
    if (flags & GLOB_NOSORT)
        flush_sorted(what);
    if (r == 0 || g.gl_pathc > 0)
        globfree(&g);
}

static void tree(void) {
    mkdir(P("w"), 0755);
    mkdir(P("w/sub"), 0755);
    mkdir(P("w/sub/deep"), 0750);
    mkdir(P("w/empty"), 0700);
    put_file(P("w/a.c"), "a");
    put_file(P("w/b.c"), "bb");
    put_file(P("w/c.h"), "ccc");
    put_file(P("w/.hidden.c"), "h");
    put_file(P("w/sub/d.c"), "dddd");
    put_file(P("w/sub/deep/e.c"), "eeeee");
    symlink("a.c", P("w/flink"));
    symlink("nowhere", P("w/dangling"));
    /* A tree with a link to a directory: walked physically only (following it,
     * which of the two names is walked depends on the order of the entries). */
    mkdir(P("wl"), 0755);
    put_file(P("wl/x"), "x");
    symlink("../w/sub", P("wl/sublink"));
}

static void globs(void) {
    globbed("files", P("w/*.c"), 0);
    globbed("mark", P("w/*"), GLOB_MARK);
    globbed("onlydir", P("w/*"), GLOB_ONLYDIR | GLOB_MARK);
    globbed("period", P("w/*.c"), GLOB_PERIOD);
    globbed("two levels", P("w/*/*.c"), 0);
    globbed("three levels", P("*/*/*/*.c"), 0);
    globbed("no magic", P("w/sub/deep/e.c"), 0);
    globbed("no magic missing", P("w/sub/deep/none.c"), 0);
    globbed("nomatch", P("w/*.none"), 0);
    globbed("nocheck", P("w/*.none"), GLOB_NOCHECK);
    globbed("brace", P("w/{a,b,c}.?"), GLOB_BRACE);
    globbed("nosort count", P("w/sub/*"), GLOB_NOSORT | GLOB_MARK);
    globbed("dangling link", P("w/dang*"), 0);
    globbed("missing dir", P("none/*"), GLOB_ERR);
    globbed("link dir", P("wl/sublink/*"), 0);
    glob_t g;
    memset(&g, 0, sizeof g);
    CHECK(glob(P("w/*.h"), 0, NULL, &g));
    CHECK(glob(P("w/sub/*.c"), GLOB_APPEND, NULL, &g));
    for (size_t i = 0; i < g.gl_pathc; i++)
        say("  append %s", rel(g.gl_pathv[i]));
    globfree(&g);
    glob64_t g64;
    memset(&g64, 0, sizeof g64);
    CHECK(glob64(P("w/?.c"), 0, NULL, &g64));
    say("glob64 count %zu", g64.gl_pathc);
    globfree64(&g64);
    /* Relative, from a current directory inside the tree. */
    int home = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(chdir(P("w")));
    globbed("relative", "*.?", 0);
    globbed("relative sub", "sub/*", GLOB_MARK);
    globbed("relative up", "../w/s*", 0);
    CHECK(fchdir(home));
    close(home);
}

/* ---- scandir ---------------------------------------------------------------- */

static int only_c(const struct dirent *d) {
    size_t n = strlen(d->d_name);
    return n > 2 && strcmp(d->d_name + n - 2, ".c") == 0;
}

static void listed(const char *what, int n, struct dirent **list, int sorted) {
    say("%s: %d", what, n);
    if (n < 0)
        return;
    for (int i = 0; i < n; i++) {
        if (sorted)
            say("  %s type %d", list[i]->d_name, list[i]->d_type);
        else
            add("%s type %d", list[i]->d_name, list[i]->d_type);
        free(list[i]);
    }
    free(list);
    if (!sorted)
        flush_sorted(what);
}

static void scandirs(void) {
    struct dirent **list;
    struct dirent64 **list64;
    int n = scandir(P("w"), &list, NULL, alphasort);
    listed("scandir", n, list, 1);
    n = scandir(P("w"), &list, only_c, alphasort);
    listed("scandir filter", n, list, 1);
    n = scandir(P("w/sub"), &list, NULL, NULL);
    listed("scandir unsorted", n, list, 0);
    n = scandir64(P("w/sub/deep"), &list64, NULL, alphasort64);
    listed("scandir64", n, (struct dirent **)list64, 1);
    int dfd = open(P("w"), O_RDONLY | O_DIRECTORY);
    n = scandirat(dfd, "sub", &list, NULL, alphasort);
    listed("scandirat", n, list, 1);
    n = scandirat64(dfd, "empty", &list64, NULL, alphasort64);
    listed("scandirat64", n, (struct dirent **)list64, 1);
    n = scandirat(AT_FDCWD, P("w/sub"), &list, only_c, alphasort);
    listed("scandirat cwd", n, list, 1);
    close(dfd);
    errno = 0;
    n = scandir(P("none"), &list, NULL, alphasort);
    say("scandir missing: %d errno %d", n, errno);
    errno = 0;
    n = scandir(P("w/a.c"), &list, NULL, alphasort);
    say("scandir file: %d errno %d", n, errno);
    int home = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(chdir(P("w")));
    n = scandir("sub", &list, NULL, alphasort);
    listed("scandir relative", n, list, 1);
    CHECK(fchdir(home));
    close(home);
}

/* ---- ftw, nftw -------------------------------------------------------------- */

static int walk_flags;
static int stop_with;
static const char *stop_at;
static int calls;
static int order_ok;
static char seen_dp[64][PATH_MAX];
static int nseen_dp;

static const char *kind_name(int t) {
    switch (t) {
    case FTW_F: return "F";
    case FTW_D: return "D";
    case FTW_DNR: return "DNR";
    case FTW_NS: return "NS";
    case FTW_SL: return "SL";
    case FTW_DP: return "DP";
    case FTW_SLN: return "SLN";
    }
    return "?";
}

static int visit(const char *p, const struct stat *st, int t, struct FTW *f) {
    calls++;
    char cwd[PATH_MAX] = "-";
    if (walk_flags & FTW_CHDIR) {
        if (getcwd(cwd, sizeof cwd) == NULL)
            strcpy(cwd, "?");
        memmove(cwd, rel(cwd), strlen(rel(cwd)) + 1);
    }
    long long size = (t == FTW_F) ? (long long)st->st_size : -1;
    /* The base as an offset in the path without the root. */
    int base = f->base - (int)(rel(p) - p);
    add("%s %s base %d [%s] level %d size %lld mode %o cwd [%s]", kind_name(t), rel(p), base,
        p + f->base, f->level, size, t == FTW_NS ? 0 : st->st_mode & S_IFMT, cwd);
    /* Post-order: nothing under a directory is visited after it. */
    if (walk_flags & FTW_DEPTH) {
        for (int i = 0; i < nseen_dp; i++)
            if (strncmp(p, seen_dp[i], strlen(seen_dp[i])) == 0 && p[strlen(seen_dp[i])] == '/')
                order_ok = 0;
        if (t == FTW_DP && nseen_dp < 64)
            strcpy(seen_dp[nseen_dp++], p);
    }
    if (stop_with && strcmp(p + f->base, stop_at) == 0)
        return stop_with;
    if ((walk_flags & FTW_ACTIONRETVAL) && t == FTW_D && strcmp(p + f->base, "sub") == 0)
        return FTW_SKIP_SUBTREE;
    return 0;
}

static int visit_old(const char *p, const struct stat *st, int t) {
    add("%s %s size %lld", kind_name(t), rel(p), t == FTW_F ? (long long)st->st_size : -1);
    return 0;
}

static void walked(const char *what, const char *path, int nopen, int flags) {
    walk_flags = flags;
    calls = 0;
    order_ok = 1;
    nseen_dp = 0;
    errno = 0;
    int r = nftw(path, visit, nopen, flags);
    if (stop_with) {
        /* Stopped: what came before depends on the order of the entries. */
        say("%s: nftw = %d errno %d", what, r, r < 0 ? errno : 0);
        nblock = 0;
        return;
    }
    say("%s: nftw = %d errno %d calls %d order %d", what, r, r < 0 ? errno : 0, calls, order_ok);
    flush_sorted(what);
}

static void walks(void) {
    walked("follow", P("w"), 16, 0);
    walked("phys", P("w"), 16, FTW_PHYS);
    walked("depth", P("w"), 16, FTW_PHYS | FTW_DEPTH);
    walked("mount", P("w"), 16, FTW_MOUNT);
    walked("chdir", P("w"), 16, FTW_CHDIR | FTW_PHYS);
    walked("one stream", P("w"), 1, FTW_PHYS | FTW_DEPTH);
    walked("one stream chdir", P("w"), 1, FTW_CHDIR | FTW_DEPTH);
    walked("links phys", P("wl"), 4, FTW_PHYS);
    walked("skip subtree", P("w"), 4, FTW_ACTIONRETVAL | FTW_PHYS);
    walked("a file", P("w/a.c"), 4, 0);
    walked("a dangling link", P("w/dangling"), 4, 0);
    walked("a link phys", P("w/flink"), 4, FTW_PHYS);
    walked("trailing slash", P("w/sub/"), 4, 0);
    walked("missing", P("w/none"), 4, 0);
    walked("bad flags", P("w"), 4, 0x4000);
    stop_with = 7;
    stop_at = "e.c";
    walked("stop", P("w"), 4, FTW_PHYS);
    stop_with = FTW_STOP;
    stop_at = "b.c";
    walked("FTW_STOP", P("w"), 4, FTW_PHYS | FTW_ACTIONRETVAL);
    stop_with = 0;
    walk_flags = 0;
    errno = 0;
    say("nftw64 = %d", nftw64(P("w/sub"), (__nftw64_func_t)visit, 4, FTW_PHYS));
    flush_sorted("nftw64");
    say("ftw = %d", ftw(P("w"), visit_old, 4));
    flush_sorted("ftw");
    say("ftw64 = %d", ftw64(P("w/sub"), (__ftw64_func_t)visit_old, 1));
    flush_sorted("ftw64");
    int home = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(chdir(P("w")));
    walked("relative", "sub", 4, 0);
    walked("relative chdir", "sub", 4, FTW_CHDIR);
    walked("relative dot", ".", 4, FTW_PHYS);
    CHECK(fchdir(home));
    close(home);
}

/* ---- exec ------------------------------------------------------------------- */

/* `entries child WHAT OUT ARGS...`: writes what it was given to OUT. */
static int child(int argc, char **argv) {
    char text[512];
    int n = snprintf(text, sizeof text, "%s argc %d", argv[2], argc);
    for (int i = 4; i < argc; i++)
        n += snprintf(text + n, sizeof text - n, " [%s]", argv[i]);
    const char *extra = getenv("ENTRIES_EXTRA");
    snprintf(text + n, sizeof text - n, " extra %s", extra ? extra : "-");
    put_file(argv[3], text);
    return 0;
}

/* `entries handover FD`: writes to the descriptor it was handed and to a file of
 * the current directory it was handed. */
static int handover(char **argv) {
    int fd = atoi(argv[2]);
    ssize_t w = write(fd, "child;", 6);
    put_file("rel", w == 6 ? "ok" : "write failed");
    return 0;
}

static void waited(const char *what, pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    say("%s: exited %d status %d", what, WIFEXITED(status), WEXITSTATUS(status));
}

extern char **environ;

static void execs(void) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", self_exe);
    *strrchr(dir, '/') = '\0';
    const char *base = strrchr(self_exe, '/') + 1;
    pid_t pid = fork();
    if (pid == 0) {
        execl(self_exe, self_exe, "child", "execl", P("ex-l"), "a b", "", "c", (char *)NULL);
        _exit(127);
    }
    waited("execl", pid);
    read_file("execl", P("ex-l"));
    pid = fork();
    if (pid == 0) {
        int n = 0;
        while (environ[n])
            n++;
        char **env = calloc(n + 2, sizeof *env);
        memcpy(env, environ, n * sizeof *env);
        env[n] = "ENTRIES_EXTRA=le";
        execle(self_exe, self_exe, "child", "execle", P("ex-le"), "x", (char *)NULL, env);
        _exit(127);
    }
    waited("execle", pid);
    read_file("execle", P("ex-le"));
    pid = fork();
    if (pid == 0) {
        setenv("PATH", dir, 1);
        execlp(base, base, "child", "execlp", P("ex-lp"), (char *)NULL);
        _exit(127);
    }
    waited("execlp", pid);
    read_file("execlp", P("ex-lp"));
    /* A failing exec returns -1 and errno, as libc's. */
    CHECK(execl(P("no-such-program"), "x", (char *)NULL));
    CHECK(execlp("no-such-program-anywhere", "x", (char *)NULL));
    /* The hand-over of a descriptor and the current directory (joined to a server
     * only: with an image the process mounts, an exec closes them; see
     * docs/PRELOAD.md). */
    if (getenv("EASYIO_SERVER") == NULL) {
        say("handover: not served");
        return;
    }
    mkdir(P("hod"), 0755);
    int fd = open(P("ho"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(write(fd, "parent;", 7));
    int home = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(chdir(P("hod")));
    pid = fork();
    if (pid == 0) {
        char num[16];
        snprintf(num, sizeof num, "%d", fd);
        execl(self_exe, self_exe, "handover", num, (char *)NULL);
        _exit(127);
    }
    waited("handover", pid);
    CHECK(fchdir(home));
    close(home);
    close(fd);
    read_file("handover fd", P("ho"));
    read_file("handover cwd", P("hod/rel"));
}

/* ---- dprintf ---------------------------------------------------------------- */

static int vd(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vdprintf(fd, fmt, ap);
    va_end(ap);
    return r;
}

static void prints(void) {
    int fd = open(P("printed"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(dprintf(fd, "n=%d s=%s f=%.2f|", 42, "str", 1.5));
    CHECK(__dprintf_chk(fd, 1, "chk %05d %c|", 7, 'z'));
    CHECK(vd(fd, "v %ld %x|", 123456789012L, 255u));
    CHECK(dprintf(fd, "%s", ""));
    close(fd);
    read_file("printed", P("printed"));
    CHECK(dprintf(fd, "closed"));
    fd = open(P("printed"), O_RDONLY);
    CHECK(dprintf(fd, "read only"));
    close(fd);
}

/* ---- mknod ------------------------------------------------------------------ */

static void nodes(void) {
    struct stat st;
    mkdir(P("n"), 0755);
    int dfd = open(P("n"), O_RDONLY | O_DIRECTORY);
    CHECK(mkfifo(P("n/fifo"), 0640));
    stat_line("fifo", P("n/fifo"), 0);
    CHECK(mkfifo(P("n/fifo"), 0640));
    CHECK(mkfifoat(dfd, "fifo2", 0600));
    stat_line("fifo2", P("n/fifo2"), 0);
    CHECK(mknod(P("n/reg"), S_IFREG | 0600, 0));
    stat_line("reg", P("n/reg"), 0);
    CHECK(mknod(P("n/zero"), 0644, 0));
    stat_line("zero", P("n/zero"), 0);
    CHECK(mknodat(dfd, "fifo3", S_IFIFO | 0644, 0));
    stat_line("fifo3", P("n/fifo3"), 0);
    CHECK(mknod(P("n/dir"), S_IFDIR | 0755, 0));
    CHECK(mknod(P("n/none/x"), S_IFIFO | 0644, 0));
    CHECK(mknod(P("n/chr"), S_IFCHR | 0600, makedev(1, 3)));
    if (stat(P("n/chr"), &st) == 0)
        say("chr: mode %o rdev %u:%u", st.st_mode, major(st.st_rdev), minor(st.st_rdev));
    dev_t dev = 0;
    CHECK(__xmknod(0, P("n/x1"), S_IFIFO | 0600, &dev));
    stat_line("x1", P("n/x1"), 0);
    CHECK(__xmknod(1, P("n/x2"), S_IFIFO | 0600, &dev));
    CHECK(__xmknodat(0, dfd, "x3", S_IFREG | 0640, &dev));
    stat_line("x3", P("n/x3"), 0);
    close(dfd);
}

/* ---- syscall ---------------------------------------------------------------- */

/* The names of a directory read with getdents64 (`old`: getdents) by syscall. */
static void dents(const char *what, const char *dir, int old) {
    int fd = syscall(SYS_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY);
    char buf[512];
    long n, total = 0;
    while ((n = syscall(old ? SYS_getdents : SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            unsigned short reclen = *(unsigned short *)(buf + off + 16);
            const char *name = buf + off + (old ? 18 : 19);
            unsigned char type = old ? (unsigned char)buf[off + reclen - 1] : (unsigned char)buf[off + 18];
            add("%s type %d", name, type);
            off += reclen;
            total++;
        }
    }
    say("%s: last %ld errno %d", what, n, n < 0 ? errno : 0);
    flush_sorted(what);
    CHECK(syscall(SYS_lseek, fd, 0, SEEK_SET));
    CHECK(syscall(SYS_getdents64, fd, buf, 8) < 0 ? -1 : 0);
    syscall(SYS_close, fd);
}

static void raw_names(void) {
    struct stat st;
    char buf[PATH_MAX];
    CHECK(syscall(SYS_mkdir, P("s"), 0755));
    CHECK(syscall(SYS_mkdirat, AT_FDCWD, P("s/d"), 0700));
    CHECK(syscall(SYS_mkdir, P("s"), 0755));
    int fd = syscall(SYS_open, P("s/o"), O_CREAT | O_WRONLY, 0640);
    say("open %d", fd >= 0);
    CHECK(syscall(SYS_close, fd));
    fd = syscall(SYS_creat, P("s/c"), 0600);
    CHECK(syscall(SYS_write, fd, "creat", 5));
    CHECK(syscall(SYS_close, fd));
    CHECK(syscall(SYS_stat, P("s/c"), &st));
    say("stat mode %o size %lld", st.st_mode, (long long)st.st_size);
    CHECK(syscall(SYS_newfstatat, AT_FDCWD, P("s/d"), &st, 0));
    say("newfstatat mode %o", st.st_mode);
    struct statx sx;
    CHECK(syscall(SYS_statx, AT_FDCWD, P("s/c"), 0, STATX_BASIC_STATS, &sx));
    say("statx mode %o size %llu", sx.stx_mode, (unsigned long long)sx.stx_size);
    CHECK(syscall(SYS_access, P("s/c"), R_OK | W_OK));
    CHECK(syscall(SYS_access, P("s/none"), F_OK));
    CHECK(syscall(SYS_faccessat, AT_FDCWD, P("s/c"), X_OK));
    CHECK(syscall(SYS_faccessat2, AT_FDCWD, P("s/c"), F_OK, AT_SYMLINK_NOFOLLOW));
    CHECK(syscall(SYS_rename, P("s/o"), P("s/o2")));
    CHECK(syscall(SYS_renameat, AT_FDCWD, P("s/o2"), AT_FDCWD, P("s/o3")));
    CHECK(syscall(SYS_renameat2, AT_FDCWD, P("s/o3"), AT_FDCWD, P("s/c"), RENAME_NOREPLACE));
    CHECK(syscall(SYS_link, P("s/c"), P("s/hard")));
    CHECK(syscall(SYS_linkat, AT_FDCWD, P("s/c"), AT_FDCWD, P("s/hard2"), 0));
    CHECK(syscall(SYS_stat, P("s/c"), &st));
    say("nlink %lu", (unsigned long)st.st_nlink);
    CHECK(syscall(SYS_symlink, "c", P("s/sym")));
    CHECK(syscall(SYS_symlinkat, "nowhere", AT_FDCWD, P("s/sym2")));
    CHECK(syscall(SYS_lstat, P("s/sym"), &st));
    say("lstat mode %o", st.st_mode & S_IFMT);
    memset(buf, 0, sizeof buf);
    CHECK(syscall(SYS_readlink, P("s/sym"), buf, sizeof buf));
    CHECK(syscall(SYS_readlinkat, AT_FDCWD, P("s/sym2"), buf, sizeof buf));
    say("readlink %s", buf);
    CHECK(syscall(SYS_chmod, P("s/c"), 0604));
    CHECK(syscall(SYS_fchmodat, AT_FDCWD, P("s/hard"), 0640));
    CHECK(syscall(SYS_chown, P("s/c"), getuid(), getgid()));
    CHECK(syscall(SYS_fchownat, AT_FDCWD, P("s/sym"), getuid(), getgid(), AT_SYMLINK_NOFOLLOW));
    CHECK(syscall(SYS_mknod, P("s/fifo"), S_IFIFO | 0600, 0));
    CHECK(syscall(SYS_mknodat, AT_FDCWD, P("s/node"), S_IFREG | 0600, 0));
    stat_line("raw fifo", P("s/fifo"), 0);
    CHECK(syscall(SYS_truncate, P("s/c"), 2));
    struct timespec ts[2] = {{1000000000, 5}, {1100000000, 7}};
    CHECK(syscall(SYS_utimensat, AT_FDCWD, P("s/c"), ts, 0));
    stat(P("s/c"), &st);
    say("mtime %lld.%09ld size %lld mode %o", (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
        (long long)st.st_size, st.st_mode);
    CHECK(syscall(SYS_utimes, P("s/c"), NULL));
    dents("getdents64", P("s"), 0);
    dents("getdents", P("s"), 1);
    CHECK(syscall(SYS_unlink, P("s/hard")));
    CHECK(syscall(SYS_unlinkat, AT_FDCWD, P("s/hard2"), 0));
    CHECK(syscall(SYS_unlinkat, AT_FDCWD, P("s/d"), AT_REMOVEDIR));
    CHECK(syscall(SYS_rmdir, P("s")));
    CHECK(syscall(SYS_unlink, P("s/none")));
}

static void raw_descriptors(void) {
    char buf[64] = {0};
    struct stat st;
    /* The raw openat of the mount's path: served by the image (the test reads the
     * image afterwards). */
    int fd = syscall(SYS_openat, AT_FDCWD, P("x"), O_CREAT | O_RDWR | O_TRUNC, 0600);
    say("openat %d", fd >= 0);
    CHECK(syscall(SYS_write, fd, "raw data via syscall", 20));
    CHECK(syscall(SYS_lseek, fd, 4, SEEK_SET));
    CHECK(syscall(SYS_read, fd, buf, 4));
    say("read %s", buf);
    CHECK(syscall(SYS_pread64, fd, buf, 3, 0));
    CHECK(syscall(SYS_pwrite64, fd, "RAW", 3, 0));
    CHECK(syscall(SYS_fstat, fd, &st));
    say("fstat mode %o size %lld", st.st_mode, (long long)st.st_size);
    CHECK(syscall(SYS_fsync, fd));
    CHECK(syscall(SYS_fcntl, fd, F_GETFL) & O_ACCMODE);
    CHECK(syscall(SYS_fcntl, fd, F_GETFD));
    int d = syscall(SYS_dup, fd);
    say("dup %d", d > fd);
    CHECK(syscall(SYS_lseek, d, 0, SEEK_CUR));
    CHECK(syscall(SYS_dup2, fd, 60));
    CHECK(syscall(SYS_dup3, fd, 61, O_CLOEXEC));
    CHECK(syscall(SYS_fcntl, 61, F_GETFD));
    CHECK(syscall(SYS_close, 60));
    CHECK(syscall(SYS_close, 61));
    CHECK(syscall(SYS_close, d));
    CHECK(syscall(SYS_close, d));
    /* A copy between two files of the root. */
    int out = syscall(SYS_openat, AT_FDCWD, P("x-copy"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    loff_t off = 0;
    CHECK(syscall(SYS_copy_file_range, fd, &off, out, NULL, 100, 0));
    say("copy offset %lld", (long long)off);
    CHECK(syscall(SYS_ftruncate, out, 5));
    CHECK(syscall(SYS_close, out));
    read_file("x-copy", P("x-copy"));
    CHECK(syscall(SYS_close, fd));
    read_file("x", P("x"));
    CHECK(syscall(SYS_read, fd, buf, 1));
    CHECK(syscall(SYS_openat, AT_FDCWD, P("none/x"), O_RDONLY));
    /* Numbers the shim does not serve go to the kernel. */
    say("getpid %d", syscall(SYS_getpid) == getpid());
    say("gettid %d", syscall(SYS_gettid) > 0);
}

/* The current directory by syscall, and a relative unlinkat from inside the root. */
static void raw_cwd(void) {
    char buf[PATH_MAX];
    mkdir(P("cw"), 0755);
    put_file(P("cw/victim"), "the root's");
    int home = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(syscall(SYS_chdir, P("cw")));
    long n = syscall(SYS_getcwd, buf, sizeof buf);
    say("getcwd %s length ok %d", rel(buf), n == (long)strlen(buf) + 1);
    CHECK(syscall(SYS_unlinkat, AT_FDCWD, "victim", 0));
    CHECK(access("victim", F_OK));
    CHECK(syscall(SYS_mkdirat, AT_FDCWD, "made", 0755));
    CHECK(syscall(SYS_fchdir, home));
    /* The host's file of the same name, in the kernel's current directory, stays. */
    char host[PATH_MAX];
    snprintf(host, sizeof host, "%s/victim", host_dir);
    say("host victim kept %d", access(host, F_OK) == 0);
    check(access(host, F_OK) == 0, "the host's victim is still there");
    stat_line("made", P("cw/made"), 1);
    int dfd = syscall(SYS_openat, AT_FDCWD, P("cw/made"), O_RDONLY | O_DIRECTORY);
    CHECK(syscall(SYS_fchdir, dfd));
    syscall(SYS_getcwd, buf, sizeof buf);
    say("fchdir getcwd %s", rel(buf));
    CHECK(syscall(SYS_fchdir, home));
    close(dfd);
    close(home);
}

static void run(const char *r) {
    root = r;
    temps();
    tree();
    globs();
    scandirs();
    walks();
    prints();
    nodes();
    raw_names();
    raw_descriptors();
    raw_cwd();
    /* Last: a process with nothing open on an image it mounts lets it go before
     * fork, so that the programs it execs can mount it. */
    execs();
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "child") == 0)
        return child(argc, argv);
    if (argc == 3 && strcmp(argv[1], "handover") == 0)
        return handover(argv);
    if (argc != 4) {
        fprintf(stderr, "usage: entries EASYIO_ROOT KERNEL_ROOT HOST_DIR\n");
        return 2;
    }
    self_exe = realpath("/proc/self/exe", NULL);
    host_dir = argv[3];
    umask(022);
    side = 0;
    run(argv[1]);
    side = 1;
    run(argv[2]);
    int same = nlog[0] == nlog[1];
    int n = nlog[0] > nlog[1] ? nlog[0] : nlog[1];
    for (int i = 0; i < n; i++) {
        const char *a = i < nlog[0] ? logs[0][i] : "(none)";
        const char *b = i < nlog[1] ? logs[1][i] : "(none)";
        if (strcmp(a, b) != 0) {
            same = 0;
            printf("easyio: %s\nkernel: %s\n", a, b);
        }
    }
    if (!same || failures) {
        printf("%d checks failed; logs %s\n", failures, same ? "same" : "differ");
        return 1;
    }
    if (getenv("ENTRIES_LOG"))
        for (int i = 0; i < nlog[0]; i++)
            printf("%s\n", logs[0][i]);
    printf("%d calls compared: same\n", nlog[0]);
    return 0;
}
