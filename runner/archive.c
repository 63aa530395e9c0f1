/*
 * Files put into a container (the Engine API's archive PUT): a tar of
 * regular files made in memory, extracted by dockerd into a directory of
 * the container.  A pooled sandbox gets its run this way (pool.c): on a
 * read-only root the directory must be on a volume.  Files are extracted
 * in the order given: a file the sandbox waits for comes last.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "runner.h"


#define RUNNER_TAR_BLOCK  512


/* one ustar header: a regular file owned by the sandbox's user */
static void
runner_archive_header(unsigned char *h, const char *name, size_t size,
    unsigned mode)
{
    size_t    i;
    unsigned  sum;

    memset(h, 0, RUNNER_TAR_BLOCK);

    snprintf((char *) h, 100, "%s", name);
    snprintf((char *) h + 100, 8, "%07o", mode);
    snprintf((char *) h + 108, 8, "%07o", 1000);            /* uid */
    snprintf((char *) h + 116, 8, "%07o", 1000);            /* gid */
    snprintf((char *) h + 124, 12, "%011lo", (unsigned long) size);
    snprintf((char *) h + 136, 12, "%011lo", (unsigned long) time(NULL));
    h[156] = '0';                                           /* a file */
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);

    memset(h + 148, ' ', 8);

    for (sum = 0, i = 0; i < RUNNER_TAR_BLOCK; i++) {
        sum += h[i];
    }

    snprintf((char *) h + 148, 8, "%06o", sum);
}


/*
 * 200: the files are in dir (an absolute path of the container); 404 (no
 * such container or directory), 403 (a read-only place), or what
 * runner_docker_send answers.  Names are plain file names.
 */
long
runner_archive_put(const char *id, const char *dir,
    const runner_file_t *files, size_t n, char *err, size_t errlen)
{
    long            st;
    size_t          i, len, size;
    char           *esc, path[512];
    unsigned char  *tar, *p;
    CURL           *h;

    if (!runner_docker_ref_ok(id, err, errlen)) {
        return RUNNER_DOCKER_INVALID;
    }

    size = 2 * RUNNER_TAR_BLOCK;                 /* the end: two zeroes */

    for (i = 0; i < n; i++) {
        if (strlen(files[i].name) >= 100 || strchr(files[i].name, '/')) {
            snprintf(err, errlen, "archive: a malformed file name");
            return RUNNER_DOCKER_INVALID;
        }

        size += RUNNER_TAR_BLOCK + (files[i].len + RUNNER_TAR_BLOCK - 1)
                                   / RUNNER_TAR_BLOCK * RUNNER_TAR_BLOCK;
    }

    tar = calloc(1, size);
    h = curl_easy_init();
    esc = h ? curl_easy_escape(h, dir, 0) : NULL;

    if (tar == NULL || esc == NULL) {
        snprintf(err, errlen, "archive: out of memory");
        st = RUNNER_DOCKER_DOWN;
        goto done;
    }

    p = tar;

    for (i = 0; i < n; i++) {
        runner_archive_header(p, files[i].name, files[i].len, 0600);
        p += RUNNER_TAR_BLOCK;

        memcpy(p, files[i].data, files[i].len);
        len = (files[i].len + RUNNER_TAR_BLOCK - 1) / RUNNER_TAR_BLOCK
              * RUNNER_TAR_BLOCK;
        p += len;
    }

    snprintf(path, sizeof(path), "/containers/%s/archive?path=%s", id, esc);

    st = runner_docker_send("PUT", path, "application/x-tar",
                            (const char *) tar, size, RUNNER_DOCKER_QUICK_S,
                            NULL, err, errlen);

done:

    curl_free(esc);

    if (h) {
        curl_easy_cleanup(h);
    }

    free(tar);

    return st;
}
