/*
 * A model API's usage, read from the bytes as they stream through
 * (smcp_usage.h).
 */

#include <limits.h>
#include <string.h>

#include <jansson.h>

#include "smcp_usage.h"


/* a key of ours, just closed */
#define SMCP_USAGE_AFTER_NONE     0
#define SMCP_USAGE_AFTER_USAGE    1
#define SMCP_USAGE_AFTER_MODEL    2
#define SMCP_USAGE_AFTER_ESCAPED  3     /* a key with escapes: decoded at
                                           its colon */
#define SMCP_USAGE_AFTER_BACKGROUND  4
#define SMCP_USAGE_AFTER_MAX      5     /* max_tokens and the like */
#define SMCP_USAGE_AFTER_GENCFG   6     /* Gemini's generationConfig */
#define SMCP_USAGE_AFTER_MAXOUT   7     /* ... its maxOutputTokens */
#define SMCP_USAGE_AFTER_CHOICES  8     /* "n", candidateCount */

/* what must come next for it */
#define SMCP_USAGE_EXPECT_NONE    0
#define SMCP_USAGE_EXPECT_COLON   1
#define SMCP_USAGE_EXPECT_VALUE   2

/* what is being kept */
#define SMCP_USAGE_CAPTURE_NONE   0
#define SMCP_USAGE_CAPTURE_OBJECT 1
#define SMCP_USAGE_CAPTURE_MODEL  2
#define SMCP_USAGE_CAPTURE_STRING 3     /* any other string outside a
                                           usage object: an escaped key */
#define SMCP_USAGE_CAPTURE_NUMBER 4     /* a bound on the answer */

/* bytes of a string kept as it came, quotes included: a model name of
 * SMCP_USAGE_MODEL - 1 bytes, each byte escaped (\u006d), fits */
#define SMCP_USAGE_STRING         (6 * (SMCP_USAGE_MODEL - 1) + 2)

#if (SMCP_USAGE_STRING > SMCP_USAGE_OBJECT)
#error "SMCP_USAGE_OBJECT cannot hold a string kept"
#endif


void
smcp_usage_init(smcp_usage_t *u)
{
    memset(u, 0, sizeof(smcp_usage_t));
}


/* a count in the object: an integer within bounds, or -1 */
static int64_t
smcp_usage_count(json_t *o, const char *key, const char *sub)
{
    json_int_t  n;

    o = json_object_get(o, key);

    if (sub) {
        o = json_object_get(o, sub);
    }

    if (!json_is_integer(o)) {
        return -1;
    }

    n = json_integer_value(o);

    if (n < 0) {
        return -1;
    }

    return (n > SMCP_USAGE_TOKENS_MAX) ? SMCP_USAGE_TOKENS_MAX : n;
}


/* the first of the counts that is there; 0 when none is */
static int64_t
smcp_usage_first(int64_t a, int64_t b, int64_t c)
{
    return (a >= 0) ? a : (b >= 0) ? b : (c >= 0) ? c : 0;
}


static void
smcp_usage_raise(int64_t *have, int64_t n)
{
    if (n > SMCP_USAGE_TOKENS_MAX) {
        n = SMCP_USAGE_TOKENS_MAX;
    }

    if (n > *have) {
        *have = n;
    }
}


/* a usage object, whole: its counts raise the response's */
static void
smcp_usage_object(smcp_usage_t *u)
{
    json_t   *o;
    int64_t   in, out, cached, thoughts, tool, read, write;

    o = u->capture_long ? NULL : json_loadb(u->buf, u->clen, 0, NULL);

    if (!json_is_object(o)) {
        json_decref(o);
        u->dropped++;
        return;
    }

    in = smcp_usage_first(smcp_usage_count(o, "input_tokens", NULL),
                          smcp_usage_count(o, "prompt_tokens", NULL),
                          smcp_usage_count(o, "promptTokenCount", NULL));

    out = smcp_usage_first(smcp_usage_count(o, "output_tokens", NULL),
                           smcp_usage_count(o, "completion_tokens", NULL),
                           smcp_usage_count(o, "candidatesTokenCount",
                                            NULL));

    /* the cached part OpenAI and Gemini count within the input */
    cached = smcp_usage_first(
                 smcp_usage_count(o, "input_tokens_details",
                                  "cached_tokens"),
                 smcp_usage_count(o, "prompt_tokens_details",
                                  "cached_tokens"),
                 smcp_usage_count(o, "cachedContentTokenCount", NULL));

    thoughts = smcp_usage_first(smcp_usage_count(o, "thoughtsTokenCount",
                                                 NULL), -1, -1);
    tool = smcp_usage_first(smcp_usage_count(o, "toolUsePromptTokenCount",
                                             NULL), -1, -1);

    /* Anthropic's, outside its input */
    read = smcp_usage_first(smcp_usage_count(o, "cache_read_input_tokens",
                                             NULL), -1, -1);
    write = smcp_usage_first(smcp_usage_count(o,
                                              "cache_creation_input_tokens",
                                              NULL), -1, -1);

    json_decref(o);

    if (cached > in) {
        cached = in;
    }

    smcp_usage_raise(&u->input, in - cached + tool);
    smcp_usage_raise(&u->output, out + thoughts);
    smcp_usage_raise(&u->cache_read, cached + read);
    smcp_usage_raise(&u->cache_write, write);

    u->objects++;
}


static void smcp_usage_bound(smcp_usage_t *u, int64_t n);


/* which key of ours, if any */
static int
smcp_usage_which(const char *key, size_t len)
{
    if ((len == 5 && memcmp(key, "usage", 5) == 0)
        || (len == 13 && memcmp(key, "usageMetadata", 13) == 0))
    {
        return SMCP_USAGE_AFTER_USAGE;
    }

    if (len == 5 && memcmp(key, "model", 5) == 0) {
        return SMCP_USAGE_AFTER_MODEL;
    }

    if (len == 10 && memcmp(key, "background", 10) == 0) {
        return SMCP_USAGE_AFTER_BACKGROUND;
    }

    if ((len == 10 && memcmp(key, "max_tokens", 10) == 0)
        || (len == 17 && memcmp(key, "max_output_tokens", 17) == 0)
        || (len == 21 && memcmp(key, "max_completion_tokens", 21) == 0))
    {
        return SMCP_USAGE_AFTER_MAX;
    }

    if ((len == 16 && memcmp(key, "generationConfig", 16) == 0)
        || (len == 17 && memcmp(key, "generation_config", 17) == 0))
    {
        return SMCP_USAGE_AFTER_GENCFG;
    }

    if ((len == 15 && memcmp(key, "maxOutputTokens", 15) == 0)) {
        return SMCP_USAGE_AFTER_MAXOUT;
    }

    if ((len == 1 && key[0] == 'n')
        || (len == 14 && memcmp(key, "candidateCount", 14) == 0)
        || (len == 15 && memcmp(key, "candidate_count", 15) == 0))
    {
        return SMCP_USAGE_AFTER_CHOICES;
    }

    return SMCP_USAGE_AFTER_NONE;
}


/*
 * The string kept (buf, quotes included) as a JSON parser reads it, its
 * escapes decoded, into out: its length, when it is printable ASCII and
 * shorter than size; else 0, and out untouched.
 */
static size_t
smcp_usage_decode(smcp_usage_t *u, char *out, size_t size)
{
    size_t       i, n;
    json_t      *s;
    const char  *p;

    if (u->capture_long || u->clen < 2) {
        return 0;
    }

    s = NULL;

    if (memchr(u->buf, '\\', u->clen) == NULL) {
        p = u->buf + 1;
        n = u->clen - 2;

    } else {
        s = json_loadb(u->buf, u->clen, JSON_DECODE_ANY, NULL);

        if (!json_is_string(s)) {
            json_decref(s);
            return 0;
        }

        p = json_string_value(s);
        n = json_string_length(s);
    }

    for (i = 0; i < n; i++) {
        if ((unsigned char) p[i] < 0x20 || (unsigned char) p[i] > 0x7e) {
            break;
        }
    }

    if (n == 0 || n >= size || i < n) {
        json_decref(s);
        return 0;
    }

    memcpy(out, p, n);
    out[n] = '\0';

    json_decref(s);

    return n;
}


/* a string closed: the model's name, or a key of ours? */
static void
smcp_usage_close(smcp_usage_t *u)
{
    int  capture;

    capture = u->capture;

    u->after = SMCP_USAGE_AFTER_NONE;
    u->expect = SMCP_USAGE_EXPECT_NONE;

    if (capture == SMCP_USAGE_CAPTURE_MODEL) {
        u->capture = SMCP_USAGE_CAPTURE_NONE;
        (void) smcp_usage_decode(u, u->model, SMCP_USAGE_MODEL);
        return;
    }

    if (capture == SMCP_USAGE_CAPTURE_STRING) {
        u->capture = SMCP_USAGE_CAPTURE_NONE;
    }

    if (!u->key_long) {
        u->after = smcp_usage_which(u->key, u->klen);

    } else if (capture == SMCP_USAGE_CAPTURE_STRING && !u->capture_long
               && memchr(u->buf, '\\', u->clen) != NULL)
    {
        /* a key of ours to a JSON parser, perhaps: decoded if a colon
         * follows */
        u->after = SMCP_USAGE_AFTER_ESCAPED;
    }

    if (u->after != SMCP_USAGE_AFTER_NONE) {
        u->expect = SMCP_USAGE_EXPECT_COLON;
    }
}


/* the colon after a key with escapes: which key is it? */
static int
smcp_usage_escaped(smcp_usage_t *u)
{
    char  key[SMCP_USAGE_KEY];

    return smcp_usage_which(key, smcp_usage_decode(u, key, SMCP_USAGE_KEY));
}


/* a byte inside a string */
static void
smcp_usage_string_byte(smcp_usage_t *u, unsigned char c)
{
    if (c == '\n') {
        /* never inside a JSON string: the reader lost its place */
        u->in_string = 0;
        u->escape = 0;

        if (u->capture != SMCP_USAGE_CAPTURE_OBJECT) {
            u->capture = SMCP_USAGE_CAPTURE_NONE;
        }

        return;
    }

    if (u->capture == SMCP_USAGE_CAPTURE_MODEL
        || u->capture == SMCP_USAGE_CAPTURE_STRING)
    {
        if (u->clen < SMCP_USAGE_STRING) {
            u->buf[u->clen++] = (char) c;

        } else {
            u->capture_long = 1;
        }
    }

    if (u->escape) {
        u->escape = 0;
        return;
    }

    if (c == '\\') {
        u->escape = 1;
        u->key_long = 1;                /* not as it came */
        return;
    }

    if (c == '"') {
        u->in_string = 0;
        smcp_usage_close(u);
        return;
    }

    if (u->klen < SMCP_USAGE_KEY) {
        u->key[u->klen++] = (char) c;

    } else {
        u->key_long = 1;
    }
}


/* the value after a key of ours begins with this byte */
static void
smcp_usage_value(smcp_usage_t *u, unsigned char c)
{
    int  after;

    after = u->after;
    u->after = SMCP_USAGE_AFTER_NONE;
    u->expect = SMCP_USAGE_EXPECT_NONE;

    if (u->capture != SMCP_USAGE_CAPTURE_NONE) {
        return;
    }

    if (after == SMCP_USAGE_AFTER_USAGE && c == '{') {
        u->capture = SMCP_USAGE_CAPTURE_OBJECT;
        u->capture_depth = u->depth;
        u->capture_long = 0;
        u->clen = 0;

    } else if (after == SMCP_USAGE_AFTER_MODEL && u->depth == 1) {
        /* the last one: the provider's, as most JSON parsers read a key
         * named twice */
        u->model[0] = '\0';

        if (c == '"') {
            u->capture = SMCP_USAGE_CAPTURE_MODEL;
        }

    } else if (after == SMCP_USAGE_AFTER_BACKGROUND && u->depth == 1) {
        /* the last one, likewise; anything but false or null (a lax
         * parser takes 1 or "yes" for true) */
        u->background = (c != 'f' && c != 'n');

    } else if (after == SMCP_USAGE_AFTER_GENCFG && u->depth == 1
               && c == '{')
    {
        u->gencfg = 1;
        u->gencfg_depth = 2;

    } else if ((after == SMCP_USAGE_AFTER_MAX
                || after == SMCP_USAGE_AFTER_MAXOUT
                || after == SMCP_USAGE_AFTER_CHOICES)
               && (u->depth == 1
                   || (u->gencfg && u->depth == u->gencfg_depth)))
    {
        /* any spelling at either level: a bound read where the provider
         * does not look only makes the hold larger */
        u->number_of = after;

        if (c >= '0' && c <= '9') {
            u->capture = SMCP_USAGE_CAPTURE_NUMBER;
            u->number = c - '0';

        } else if (c != 'n') {
            /* not a plain integer (a string a lax parser reads, a
             * fraction): no bound; null is none */
            smcp_usage_bound(u, SMCP_USAGE_TOKENS_MAX);
        }
    }
}


/* a bound read: the answer's tokens, or its choices (n, candidateCount) */
static void
smcp_usage_bound(smcp_usage_t *u, int64_t n)
{
    if (u->number_of == SMCP_USAGE_AFTER_CHOICES) {
        smcp_usage_raise(&u->choices, n);

    } else {
        smcp_usage_raise(&u->max_output, n);
    }
}


/*
 * A byte after a bound's digits: the bound read, when it ends here; the
 * largest wins (the provider reads one of them).  A fraction or an
 * exponent is taken for no bound at all.
 */
static int
smcp_usage_number(smcp_usage_t *u, unsigned char c)
{
    if (c >= '0' && c <= '9') {
        u->number = (u->number > SMCP_USAGE_TOKENS_MAX / 10)
                    ? SMCP_USAGE_TOKENS_MAX : u->number * 10 + (c - '0');
        return 1;
    }

    u->capture = SMCP_USAGE_CAPTURE_NONE;

    if (c == '.' || c == 'e' || c == 'E') {
        u->number = SMCP_USAGE_TOKENS_MAX;
    }

    smcp_usage_bound(u, u->number);

    return 0;
}


static void
smcp_usage_byte(smcp_usage_t *u, unsigned char c)
{
    if (u->capture == SMCP_USAGE_CAPTURE_NUMBER && smcp_usage_number(u, c)) {
        return;
    }

    if (u->capture == SMCP_USAGE_CAPTURE_OBJECT) {
        if (u->clen < SMCP_USAGE_OBJECT) {
            u->buf[u->clen++] = (char) c;

        } else {
            u->capture_long = 1;
        }
    }

    if (u->in_string) {
        smcp_usage_string_byte(u, c);
        return;
    }

    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        return;
    }

    if (u->expect == SMCP_USAGE_EXPECT_COLON) {
        if (c == ':') {
            u->expect = SMCP_USAGE_EXPECT_VALUE;

            if (u->after == SMCP_USAGE_AFTER_ESCAPED) {
                u->after = smcp_usage_escaped(u);

                if (u->after == SMCP_USAGE_AFTER_NONE) {
                    u->expect = SMCP_USAGE_EXPECT_NONE;
                }
            }

            return;
        }

        u->after = SMCP_USAGE_AFTER_NONE;
        u->expect = SMCP_USAGE_EXPECT_NONE;

    } else if (u->expect == SMCP_USAGE_EXPECT_VALUE) {
        smcp_usage_value(u, c);

        if (u->capture == SMCP_USAGE_CAPTURE_OBJECT && u->clen == 0) {
            u->buf[u->clen++] = (char) c;
        }
    }

    switch (c) {

    case '"':
        u->in_string = 1;
        u->escape = 0;
        u->key_long = 0;
        u->klen = 0;

        /* kept as it comes: the model's name, or any string outside a
         * usage object (a key may be escaped) */
        if (u->capture == SMCP_USAGE_CAPTURE_NONE) {
            u->capture = SMCP_USAGE_CAPTURE_STRING;
        }

        if (u->capture != SMCP_USAGE_CAPTURE_OBJECT) {
            u->buf[0] = '"';
            u->clen = 1;
            u->capture_long = 0;
        }

        break;

    case '{':
    case '[':
        if (u->depth < UINT_MAX) {
            u->depth++;
        }
        break;

    case '}':
    case ']':
        if (u->depth) {
            u->depth--;
        }

        if (u->gencfg && u->depth < u->gencfg_depth) {
            u->gencfg = 0;
        }

        if (u->capture == SMCP_USAGE_CAPTURE_OBJECT && c == '}'
            && u->depth == u->capture_depth)
        {
            u->capture = SMCP_USAGE_CAPTURE_NONE;
            smcp_usage_object(u);
        }
        break;

    default:
        break;
    }
}


void
smcp_usage_feed(smcp_usage_t *u, const unsigned char *p, size_t n)
{
    const unsigned char  *last;

    if (n == 0) {
        return;                         /* an empty buffer: p may be NULL */
    }

    for (last = p + n; p < last; p++) {
        smcp_usage_byte(u, *p);
    }
}


void
smcp_usage_estimate(smcp_usage_t *u, int64_t request_bytes,
    int64_t response_bytes)
{
    if (request_bytes > 0) {
        smcp_usage_raise(&u->input,
                         request_bytes / SMCP_USAGE_BYTES_PER_TOKEN + 1);
    }

    if (response_bytes > 0) {
        smcp_usage_raise(&u->output,
                         response_bytes / SMCP_USAGE_BYTES_PER_TOKEN + 1);
    }
}


double
smcp_usage_cost(const smcp_usage_t *u, const smcp_usage_price_t *p)
{
    return ((double) u->input * p->input
            + (double) u->output * p->output
            + (double) u->cache_read * p->cache_read
            + (double) u->cache_write * p->cache_write) / 1e6;
}


int
smcp_usage_model_matches(const char *pattern, size_t plen,
    const char *model, size_t mlen)
{
    /* no memcmp() of nothing: model may be NULL when mlen is 0 */

    if (plen && pattern[plen - 1] == '*') {
        plen--;
        return mlen >= plen && (plen == 0 || memcmp(pattern, model, plen) == 0);
    }

    return plen == mlen && (plen == 0 || memcmp(pattern, model, plen) == 0);
}
