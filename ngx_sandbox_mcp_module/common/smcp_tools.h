/*
 * The provider's server-side tools in a model request: what a request to
 * a model API asks the provider to do on the agent's behalf beyond the
 * model's answer (search the web, fetch URLs, run code, call MCP servers,
 * fetch an image or a document by URL).  The egress proxy reads every
 * model request's body through this before a byte of it goes upstream,
 * and refuses one that asks for what the route does not allow.
 *
 * A streaming JSON reader: the body is fed in pieces as it lies in
 * memory or in nginx's temporary file, in bounded memory (this struct);
 * keys and the values it looks at are decoded (escapes, \uXXXX) before
 * they are compared, every occurrence of a duplicate key is looked at,
 * and anything it cannot read as the upstream would (invalid JSON or
 * UTF-8, a BOM, NaN, nesting deeper than SMCP_TOOLS_DEPTH, text after
 * the object) is refused.  Plain C, no nginx: fuzzed (fuzz/tools.c).
 */

#ifndef SMCP_TOOLS_H
#define SMCP_TOOLS_H

#include <stddef.h>


/* the body formats */
#define SMCP_TOOLS_ANTHROPIC    0   /* Messages API */
#define SMCP_TOOLS_OPENAI       1   /* Responses API */
#define SMCP_TOOLS_CHAT         2   /* Chat Completions */
#define SMCP_TOOLS_GEMINI       3   /* generateContent */

/* smcp_tools_feed(), smcp_tools_end() */
#define SMCP_TOOLS_OK           0   /* nothing refused (yet) */
#define SMCP_TOOLS_FOUND        1   /* a tool not allowed: name, where */
#define SMCP_TOOLS_BAD          2   /* not JSON it reads: error */

#define SMCP_TOOLS_DEPTH        128 /* nesting */
#define SMCP_TOOLS_LEVELS       8   /* levels whose keys are kept */
#define SMCP_TOOLS_KEY          32  /* bytes kept of a key */
#define SMCP_TOOLS_VALUE        64  /* bytes kept of a value looked at */
#define SMCP_TOOLS_WHERE        192


/* is the tool (its setting name, smcp_tools_setting()) allowed? */
typedef int (*smcp_tools_allowed_pt)(void *data, const char *name,
    size_t len);

typedef struct smcp_tools_rule_s  smcp_tools_rule_t;

typedef struct {
    char            key[SMCP_TOOLS_KEY];
    size_t          klen;           /* > SMCP_TOOLS_KEY: too long */
    unsigned long   index;
} smcp_tools_level_t;

typedef struct {
    const smcp_tools_rule_t  *rules;
    smcp_tools_allowed_pt     allowed;
    void                     *data;

    int                       state;
    int                       sub;          /* in a literal, an escape */
    unsigned                  depth;
    unsigned char             objects[SMCP_TOOLS_DEPTH / 8];
    smcp_tools_level_t        level[SMCP_TOOLS_LEVELS + 1];

    /* the string being read */
    unsigned                  in_key:1;
    unsigned                  keep:1;       /* decoded into buf */
    const smcp_tools_rule_t  *watch;        /* the rule of its value */
    char                      buf[SMCP_TOOLS_VALUE];
    size_t                    len;          /* decoded length, all of it */
    unsigned                  hex;          /* \uXXXX so far */
    unsigned                  high;         /* a high surrogate before */
    unsigned                  utf8_need;    /* continuation bytes */
    unsigned char             utf8_lo, utf8_hi;

    size_t                    offset;       /* bytes fed */

    /* the outcome: the tool as the request names it (web_search_20250305),
     * its setting (web_search), where in the body; or the error */
    char                      name[SMCP_TOOLS_VALUE + 1];
    char                      where[SMCP_TOOLS_WHERE];
    char                      setting[SMCP_TOOLS_VALUE + 1];
    const char               *error;
    const char               *literal;
} smcp_tools_t;


void smcp_tools_init(smcp_tools_t *s, int format,
    smcp_tools_allowed_pt allowed, void *data);

/* the next piece of the body; SMCP_TOOLS_FOUND and _BAD are final */
int smcp_tools_feed(smcp_tools_t *s, const unsigned char *p, size_t n);

/* the body is all fed: SMCP_TOOLS_OK only for one whole JSON object */
int smcp_tools_end(smcp_tools_t *s);

/*
 * Does the setting name (what an operator writes: web_search,
 * google_search) name the tool's setting name?  Case and "_" do not
 * count (googleSearch is google_search).
 */
int smcp_tools_name_is(const char *setting, size_t slen, const char *name,
    size_t len);


#endif /* SMCP_TOOLS_H */
