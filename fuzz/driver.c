/*
 * Runs a fuzz harness over files, once each, without libFuzzer: the
 * regression run of t/fuzz_regress.t (each file a seed, or an input that
 * once crashed).  Prints the name of each file before running it, so a
 * sanitizer report follows the name of the input that caused it.
 *
 *   build/fuzz-regress/<harness> FILE...
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"


static int
fuzz_run_file(const char *path)
{
    FILE     *f;
    uint8_t  *buf, *nb;
    size_t    len, cap, n;

    f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "driver: cannot open %s\n", path);
        return 1;
    }

    len = 0;
    cap = 4096;
    buf = malloc(cap);

    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;

        if (len == cap) {
            cap *= 2;
            nb = realloc(buf, cap);
            if (nb == NULL) {
                free(buf);
            }
            buf = nb;
        }
    }

    if (buf == NULL || ferror(f)) {
        fprintf(stderr, "driver: cannot read %s\n", path);
        fclose(f);
        free(buf);
        return 1;
    }

    fclose(f);

    /* exactly len bytes, as libFuzzer hands them over */
    nb = malloc(len ? len : 1);
    if (nb == NULL) {
        free(buf);
        return 1;
    }

    memcpy(nb, buf, len);
    free(buf);

    fprintf(stderr, "driver: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(nb, len);
    free(nb);

    return 0;
}


int
main(int argc, char **argv)
{
    int  i, failed;

    failed = 0;

    for (i = 1; i < argc; i++) {
        failed |= fuzz_run_file(argv[i]);
    }

    return failed;
}
