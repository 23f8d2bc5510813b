/* uthread.c: EASYIO §5 through the shim. On a runtime of one worker (the C ABI's
 * uthreads, which the shim exports: found with dlsym, so that they are the shim's
 * own runtime), a uthread spawns another (queued behind it on the same worker) and
 * makes one plain 8 MiB pread() of a file under the mount. The read must return the
 * data, the other uthread must not have run before it, and on at least one of a few
 * tries it must have run during it: the read yielded while its copy ran.
 *
 *   uthread FILE_UNDER_THE_MOUNT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef void *(*body_t)(void *);
static void *(*rt_start)(unsigned);
static int (*rt_stop)(void *);
static void *(*spawn)(void *, body_t, void *);
static int (*join)(void *, void **);

#define SIZE (8 << 20)
static atomic_int ran;
static int fd;
static int bits;

static void *mark(void *arg) {
    (void)arg;
    atomic_fetch_add(&ran, 1);
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    void *other = spawn(NULL, mark, NULL);
    int before = atomic_load(&ran);
    unsigned char *buf = malloc(SIZE);
    ssize_t n = pread(fd, buf, SIZE, 0);
    int after = atomic_load(&ran);
    join(other, NULL);
    int data = n == SIZE;
    for (ssize_t i = 0; data && i < n; i++)
        data = buf[i] == 3;
    free(buf);
    bits = data | (before == 0) << 1 | (after == 1) << 2;
    return NULL;
}

#define FIND(var, name)                                                  \
    do {                                                                 \
        *(void **)&var = dlsym(RTLD_DEFAULT, name);                      \
        if (!var) {                                                      \
            printf("%s not found: run under libeasyio_preload.so\n", name); \
            return 2;                                                    \
        }                                                                \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    FIND(rt_start, "easyio_rt_start");
    FIND(rt_stop, "easyio_rt_stop");
    FIND(spawn, "easyio_spawn");
    FIND(join, "easyio_join");
    fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    void *rt = rt_start(1);
    int yielded = 0;
    for (int i = 0; i < 5; i++) {
        atomic_store(&ran, 0);
        join(spawn(rt, reader, NULL), NULL);
        if (!(bits & 1) || !(bits & 2)) {
            printf("try %d: bits %d (1: data read back, 2: the other waited)\n", i, bits);
            return 1;
        }
        yielded += (bits & 4) != 0;
    }
    rt_stop(rt);
    close(fd);
    printf("yielded %d of 5\n", yielded);
    return yielded > 0 ? 0 : 1;
}
