/*
 * The model usage reader (common/smcp_usage.c): the egress proxy meters a
 * sandbox's model requests with it.  The answer comes from the provider
 * but carries the model's text, which the sandbox steers; the request
 * body, whose "model" prices the answer, is the sandbox's own.
 *
 * The input is an answer or a request body, fed whole, in two pieces
 * split at an offset derived from the input, and in pieces of sizes
 * drawn from it.  Checked: the same reading each way (counts, objects,
 * dropped, model); counts within [0, SMCP_USAGE_TOKENS_MAX]; the model
 * NUL-terminated, printable ASCII, shorter than SMCP_USAGE_MODEL; no count,
 * objects or dropped lower after more bytes.  When jansson reads the input
 * as JSON: the model is its top-level "model" (a printable ASCII string of
 * 1 to SMCP_USAGE_MODEL - 1 bytes; "" else), and no count is below what
 * any usage object in it says (every "usage" or "usageMetadata" object not
 * inside another, each read on its own), the same when no key is there
 * twice, unless one was dropped.
 */

#include <string.h>

#include <jansson.h>

#include "smcp_usage.h"
#include "fuzz.h"


/* what every usage object jansson finds in the input says, each read on
 * its own */
typedef struct {
    smcp_usage_t  *u;
    int64_t        input;
    int64_t        output;
    int64_t        cache_read;
    int64_t        cache_write;
    unsigned       objects;
    unsigned       dropped;
} fuzz_usage_found_t;


static void
fuzz_usage_same(const smcp_usage_t *a, const smcp_usage_t *b,
    const char *what)
{
    fuzz_check(a->input == b->input && a->output == b->output
               && a->cache_read == b->cache_read
               && a->cache_write == b->cache_write, what);
    fuzz_check(a->objects == b->objects && a->dropped == b->dropped, what);
    fuzz_check(strcmp(a->model, b->model) == 0, what);
    fuzz_check(a->max_output == b->max_output && a->choices == b->choices,
               what);
}


static void
fuzz_usage_bounds(const smcp_usage_t *u)
{
    size_t  i, n;

    fuzz_check(u->input >= 0 && u->input <= SMCP_USAGE_TOKENS_MAX
               && u->output >= 0 && u->output <= SMCP_USAGE_TOKENS_MAX
               && u->cache_read >= 0
               && u->cache_read <= SMCP_USAGE_TOKENS_MAX
               && u->cache_write >= 0
               && u->cache_write <= SMCP_USAGE_TOKENS_MAX,
               "counts within [0, SMCP_USAGE_TOKENS_MAX]");
    fuzz_check(u->max_output >= 0 && u->max_output <= SMCP_USAGE_TOKENS_MAX
               && u->choices >= 0 && u->choices <= SMCP_USAGE_TOKENS_MAX,
               "the bounds within [0, SMCP_USAGE_TOKENS_MAX]");

    n = strnlen(u->model, SMCP_USAGE_MODEL);
    fuzz_check(n < SMCP_USAGE_MODEL, "model: NUL-terminated");

    for (i = 0; i < n; i++) {
        fuzz_check(u->model[i] >= 0x20 && u->model[i] < 0x7f,
                   "model: printable ASCII");
    }
}


/* one usage object, as the reader reads it alone */
static void
fuzz_usage_one(json_t *o, fuzz_usage_found_t *f)
{
    char    *dump, *s;
    size_t   n;

    dump = json_dumps(o, JSON_COMPACT | JSON_ENCODE_ANY);
    fuzz_check(dump != NULL, "memory");

    n = strlen(dump) + sizeof("{\"usage\":}");
    s = malloc(n);
    fuzz_check(s != NULL, "memory");
    n = snprintf(s, n, "{\"usage\":%s}", dump);

    smcp_usage_init(f->u);
    smcp_usage_feed(f->u, (const unsigned char *) s, n);

    f->objects += f->u->objects;
    f->dropped += f->u->dropped;

    if (f->u->input > f->input) {
        f->input = f->u->input;
    }

    if (f->u->output > f->output) {
        f->output = f->u->output;
    }

    if (f->u->cache_read > f->cache_read) {
        f->cache_read = f->u->cache_read;
    }

    if (f->u->cache_write > f->cache_write) {
        f->cache_write = f->u->cache_write;
    }

    free(s);
    free(dump);
}


/* every usage object, not inside another */
static void
fuzz_usage_walk(json_t *v, fuzz_usage_found_t *f)
{
    size_t       i;
    json_t      *e;
    const char  *key;

    if (json_is_array(v)) {
        json_array_foreach(v, i, e) {
            fuzz_usage_walk(e, f);
        }

        return;
    }

    json_object_foreach(v, key, e) {
        if (json_is_object(e)
            && (strcmp(key, "usage") == 0
                || strcmp(key, "usageMetadata") == 0))
        {
            fuzz_usage_one(e, f);
            continue;
        }

        fuzz_usage_walk(e, f);
    }
}


/* the input as JSON, when jansson reads it: what the reader must have */
static void
fuzz_usage_json(const uint8_t *data, size_t size, const smcp_usage_t *u,
    smcp_usage_t *scratch)
{
    size_t               i, n;
    json_t              *j, *m, *strict;
    const char          *s;
    fuzz_usage_found_t   f;

    j = json_loadb((const char *) data, size, 0, NULL);

    if (j == NULL) {
        return;
    }

    /* the top-level "model": the last, as jansson reads a key twice */
    m = json_object_get(j, "model");
    s = json_string_value(m);
    n = s ? json_string_length(m) : 0;

    for (i = 0; i < n; i++) {
        if ((unsigned char) s[i] < 0x20 || (unsigned char) s[i] > 0x7e) {
            break;
        }
    }

    if (s && n > 0 && n < SMCP_USAGE_MODEL && i == n) {
        fuzz_check(strcmp(u->model, s) == 0,
                   "model: the top-level one, as jansson reads it");

    } else {
        fuzz_check(u->model[0] == '\0',
                   "model: none, when jansson's is not one");
    }

    memset(&f, 0, sizeof(fuzz_usage_found_t));
    f.u = scratch;
    fuzz_usage_walk(j, &f);

    if (u->dropped == 0 && f.dropped == 0) {
        fuzz_check(u->input >= f.input && u->output >= f.output
                   && u->cache_read >= f.cache_read
                   && u->cache_write >= f.cache_write
                   && u->objects >= f.objects,
                   "no count below what a usage object says");

        strict = json_loadb((const char *) data, size,
                            JSON_REJECT_DUPLICATES, NULL);

        if (strict) {
            fuzz_check(u->input == f.input && u->output == f.output
                       && u->cache_read == f.cache_read
                       && u->cache_write == f.cache_write
                       && u->objects == f.objects,
                       "no key twice: the usage objects jansson finds");
        }

        json_decref(strict);
    }

    json_decref(j);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t         off, n;
    uint64_t       rng;
    smcp_usage_t  *whole, *split, *chunks, *before;

    whole = malloc(sizeof(smcp_usage_t));
    split = malloc(sizeof(smcp_usage_t));
    chunks = malloc(sizeof(smcp_usage_t));
    before = malloc(sizeof(smcp_usage_t));
    fuzz_check(whole && split && chunks && before, "memory");

    rng = fuzz_hash(FUZZ_HASH_INIT, data, size) | 1;
    off = size ? fuzz_next(&rng) % (size + 1) : 0;

    smcp_usage_init(whole);
    smcp_usage_feed(whole, data, size);
    fuzz_usage_bounds(whole);

    /* two pieces; the first alone, then more bytes */
    smcp_usage_init(split);
    smcp_usage_feed(split, data, off);
    fuzz_usage_bounds(split);
    memcpy(before, split, sizeof(smcp_usage_t));

    smcp_usage_feed(split, data + off, size - off);
    fuzz_usage_same(whole, split, "split in two: the same reading");

    fuzz_check(split->input >= before->input
               && split->output >= before->output
               && split->cache_read >= before->cache_read
               && split->cache_write >= before->cache_write
               && split->objects >= before->objects
               && split->dropped >= before->dropped,
               "more bytes: nothing lower");

    /* pieces of 0 to 64 bytes */
    smcp_usage_init(chunks);

    for (off = 0; off < size; off += n) {
        n = fuzz_next(&rng) % 65;

        if (n > size - off) {
            n = size - off;
        }

        smcp_usage_feed(chunks, data + off, n);
    }

    fuzz_usage_same(whole, chunks, "in pieces: the same reading");

    fuzz_usage_json(data, size, whole, before);

    free(before);
    free(chunks);
    free(split);
    free(whole);

    return 0;
}
