/*
 * A model API's usage, read by the egress proxy from the response as it
 * streams through (SSE or one JSON body): the tokens the provider bills,
 * whatever the agent in the sandbox says.  With a price per model this is
 * the run's metered cost, which its maxCostUsd is held against.
 *
 * A byte-at-a-time reader in bounded memory (this struct), fed the pieces
 * as they come: it follows JSON strings (so a key inside a string, which
 * the model's own text can hold only escaped, is never taken for one) and
 * takes every object under a key "usage" or "usageMetadata" (a key read
 * as a JSON parser reads it, escapes decoded), at any depth, of at most
 * SMCP_USAGE_OBJECT bytes, and reads it with jansson:
 *
 *   Anthropic Messages   input_tokens, output_tokens,
 *                        cache_read_input_tokens,
 *                        cache_creation_input_tokens
 *   OpenAI Responses     input_tokens (cached included), output_tokens,
 *                        input_tokens_details.cached_tokens
 *   Chat Completions     prompt_tokens (cached included),
 *                        completion_tokens,
 *                        prompt_tokens_details.cached_tokens
 *   Gemini               promptTokenCount (cached included),
 *                        candidatesTokenCount, thoughtsTokenCount,
 *                        toolUsePromptTokenCount, cachedContentTokenCount
 *
 * A stream's usage objects are running totals (message_start, then
 * message_delta; Gemini's every chunk), so each count is the largest any
 * object of the response gave: an object that is not the real one can
 * raise a count, never lower it.
 *
 * Fed a request body instead, it keeps the string of the top-level key
 * "model" (the model the provider bills), as the provider's JSON parser
 * reads it: escapes decoded, the last when the key is there twice; ""
 * when that is not a string of printable ASCII shorter than
 * SMCP_USAGE_MODEL.  And whether the top-level key "background" (the
 * last one) is anything but false or null: OpenAI's background response,
 * which answers at once without a usage while the provider generates,
 * and bills, on its own.  And the largest bound on the answer's tokens
 * the request gives where its provider reads one: a top-level
 * "max_tokens", "max_output_tokens" or "max_completion_tokens", or
 * Gemini's "generationConfig": {"maxOutputTokens"} (any of these at
 * either level: a bound the provider does not read only raises it); an
 * integer, else (a fraction, an exponent, a string) SMCP_USAGE_TOKENS_MAX;
 * 0 when none is.  Likewise the answers asked for: "n", "candidateCount"
 * (choices), which multiply it.
 * Plain C, no nginx: fuzzed (fuzz/usage.c).
 */

#ifndef SMCP_USAGE_H
#define SMCP_USAGE_H

#include <stddef.h>
#include <stdint.h>


#define SMCP_USAGE_OBJECT       4096    /* bytes of a usage object */
#define SMCP_USAGE_MODEL        128     /* bytes of a model name, NUL too */
#define SMCP_USAGE_KEY          24      /* bytes of a key looked at */
#define SMCP_USAGE_TOKENS_MAX   1000000000000LL     /* a count, at most */

/* when nothing says the usage: bytes per token of the estimate */
#define SMCP_USAGE_BYTES_PER_TOKEN  4


typedef struct {
    /* what was read: input excludes the cached part */
    int64_t     input;
    int64_t     output;
    int64_t     cache_read;
    int64_t     cache_write;
    unsigned    objects;        /* usage objects read */
    unsigned    dropped;        /* too long, or not JSON */
    unsigned    background:1;   /* "background": not false */
    int64_t     max_output;     /* the answer's bound (0: none said) */
    int64_t     choices;        /* answers asked for, n (0: none said) */
    char        model[SMCP_USAGE_MODEL];   /* "": none (yet) */

    /* the reader */
    unsigned    depth;
    unsigned    in_string:1;
    unsigned    escape:1;
    unsigned    key_long:1;
    unsigned    capture_long:1;
    unsigned    gencfg:1;       /* inside "generationConfig" */
    unsigned    gencfg_depth;
    int64_t     number;         /* a bound being read */
    int         number_of;      /* which */
    int         after;          /* a key of ours just closed: which */
    int         expect;         /* what must come next for it */
    int         capture;        /* what is being kept */
    unsigned    capture_depth;
    size_t      klen;
    char        key[SMCP_USAGE_KEY];
    size_t      clen;
    char        buf[SMCP_USAGE_OBJECT];
} smcp_usage_t;


typedef struct {
    double      input;          /* USD per million tokens */
    double      output;
    double      cache_read;
    double      cache_write;
} smcp_usage_price_t;


void smcp_usage_init(smcp_usage_t *u);

/* a piece of the response (or of the request body) */
void smcp_usage_feed(smcp_usage_t *u, const unsigned char *p, size_t n);

/* nothing read said the usage: count the bytes as tokens instead, the
 * request's as input and the response's as output */
void smcp_usage_estimate(smcp_usage_t *u, int64_t request_bytes,
    int64_t response_bytes);

/* USD, by the price */
double smcp_usage_cost(const smcp_usage_t *u, const smcp_usage_price_t *p);

/* does a price's model pattern (exact, "prefix*", or "*") match? */
int smcp_usage_model_matches(const char *pattern, size_t plen,
    const char *model, size_t mlen);


#endif /* SMCP_USAGE_H */
