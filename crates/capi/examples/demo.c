/* demo.c: easyio from C. Formats and mounts a fresh image, writes files, then
 * runs uthreads that each submit asynchronous reads and compute while the copies
 * run, checks every byte, and unmounts. Exit status 0 only if everything checks.
 *
 *   cc demo.c $(pkg-config --cflags --libs easyio) -o demo && ./demo /dev/shm/demo.img
 */
#include <easyio.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILES 4
#define FILE_SIZE (1u << 20)
#define CHUNK (64u << 10)
#define DEPTH 4 /* reads in flight per uthread */
#define UTHREADS 8

static easyio_fs *fs;

#define CHECK(cond, what)                                                             \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "demo: %s failed: %s (errno %d: %s)\n", what,           \
                    easyio_last_error(), errno, strerror(errno));                     \
            return 0;                                                                 \
        }                                                                             \
    } while (0)

static uint8_t pattern(int file, size_t off) {
    return (uint8_t)((file * 131u + off * 7u + (off >> 12)) % 251u);
}

static int write_files(void) {
    uint8_t *buf = malloc(FILE_SIZE);
    CHECK(buf != NULL, "malloc");
    CHECK(easyio_mkdir(fs, "/data", 0755) == 0, "mkdir /data");
    for (int f = 0; f < FILES; f++) {
        char path[64];
        snprintf(path, sizeof path, "/data/file%d", f);
        for (size_t i = 0; i < FILE_SIZE; i++)
            buf[i] = pattern(f, i);
        int fd = easyio_open(fs, path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        CHECK(fd >= 0, "open for writing");
        CHECK(easyio_write(fs, fd, buf, FILE_SIZE) == (ssize_t)FILE_SIZE, "write");
        CHECK(easyio_close(fs, fd) == 0, "close");
    }
    free(buf);
    return 1;
}

/* Work to overlap with the copies: a little hashing of a private buffer. */
static uint64_t compute(uint64_t seed) {
    uint64_t h = seed ^ 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++)
        h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull + (uint64_t)i;
    return h;
}

struct task {
    int id;
    int ok;
    uint64_t overlapped; /* polls that found a read still running */
    uint64_t hash;
};

static int check_chunk(const uint8_t *buf, int file, size_t off, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pattern(file, off + i)) {
            fprintf(stderr, "demo: file%d byte %zu is %u, expected %u\n", file, off + i,
                    buf[i], pattern(file, off + i));
            return 0;
        }
    return 1;
}

/* Reads a whole file in DEPTH chunks at a time, computing while they are in flight. */
static int read_file(struct task *t) {
    int file = t->id % FILES;
    char path[64];
    snprintf(path, sizeof path, "/data/file%d", file);
    int fd = easyio_open(fs, path, O_RDONLY, 0);
    CHECK(fd >= 0, "open for reading");
    /* Each uthread its own buffers: uthreads of one worker share its thread-locals. */
    uint8_t (*bufs)[CHUNK] = malloc(DEPTH * CHUNK);
    CHECK(bufs != NULL, "malloc");
    for (size_t base = 0; base < FILE_SIZE; base += DEPTH * CHUNK) {
        uint64_t ids[DEPTH];
        for (int k = 0; k < DEPTH; k++) {
            int64_t id = easyio_submit_pread(fs, fd, bufs[k], CHUNK, (off_t)(base + k * CHUNK));
            CHECK(id >= 1, "submit_pread");
            ids[k] = (uint64_t)id;
        }
        struct easyio_completion c;
        int r = easyio_poll(fs, ids[0], &c);
        CHECK(r >= 0, "poll");
        if (r == 0)
            t->overlapped++;
        t->hash = compute(t->hash + base);
        struct easyio_completion done[DEPTH];
        int left = r == 1 ? DEPTH - 1 : DEPTH;
        uint64_t *rest = r == 1 ? ids + 1 : ids;
        if (r == 1)
            CHECK(c.res == CHUNK, "first read's completion");
        CHECK(easyio_wait_many(fs, rest, (size_t)left, (size_t)left, done) == left, "wait_many");
        for (int k = 0; k < left; k++)
            CHECK(done[k].res == CHUNK, "a read's completion");
        for (int k = 0; k < DEPTH; k++)
            if (!check_chunk(bufs[k], file, base + k * CHUNK, CHUNK))
                return 0;
    }
    free(bufs);
    CHECK(easyio_close(fs, fd) == 0, "close");
    return 1;
}

static void *task_main(void *arg) {
    struct task *t = arg;
    if (!easyio_in_uthread()) {
        fprintf(stderr, "demo: a task is not running in a uthread\n");
        return arg;
    }
    t->ok = read_file(t);
    easyio_yield();
    return arg;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s IMAGE (a new file, e.g. in /dev/shm)\n", argv[0]);
        return 2;
    }
    if (easyio_mkfs(argv[1], 64u << 20) != 0) {
        fprintf(stderr, "demo: mkfs %s: %s\n", argv[1], easyio_last_error());
        return 1;
    }
    easyio_mount_options opts = {.mode = "async"};
    fs = easyio_mount(argv[1], &opts);
    if (fs == NULL) {
        fprintf(stderr, "demo: mount: %s\n", easyio_last_error());
        return 1;
    }
    if (!write_files())
        return 1;
    easyio_rt *rt = easyio_rt_start(2);
    if (rt == NULL) {
        fprintf(stderr, "demo: runtime: %s\n", easyio_last_error());
        return 1;
    }
    struct task tasks[UTHREADS];
    easyio_uthread *threads[UTHREADS];
    for (int i = 0; i < UTHREADS; i++) {
        tasks[i] = (struct task){.id = i};
        threads[i] = easyio_spawn(rt, task_main, &tasks[i]);
        if (threads[i] == NULL) {
            fprintf(stderr, "demo: spawn: %s\n", easyio_last_error());
            return 1;
        }
    }
    int failed = 0;
    uint64_t overlapped = 0;
    for (int i = 0; i < UTHREADS; i++) {
        void *ret = NULL;
        if (easyio_join(threads[i], &ret) != 0 || ret != &tasks[i] || !tasks[i].ok) {
            fprintf(stderr, "demo: uthread %d failed\n", i);
            failed = 1;
        }
        overlapped += tasks[i].overlapped;
    }
    if (easyio_rt_stop(rt) != 0 || easyio_unmount(fs) != 0) {
        fprintf(stderr, "demo: shutdown: %s\n", easyio_last_error());
        return 1;
    }
    if (failed)
        return 1;
    printf("demo: ok: %d uthreads read %d files of %u KiB in %u KiB requests, %u in flight "
           "each; %llu polls found a read still running while its uthread computed\n",
           UTHREADS, FILES, FILE_SIZE >> 10, CHUNK >> 10, DEPTH, (unsigned long long)overlapped);
    return 0;
}
