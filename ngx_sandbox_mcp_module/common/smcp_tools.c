/*
 * The provider's server-side tools in a model request (smcp_tools.h): a
 * streaming JSON reader, and per body format the rules of what it
 * refuses.
 */

#include <stdio.h>
#include <string.h>

#include "smcp_tools.h"
#include "smcp_util.h"


/* a rule: what at `path` ("*": an array's element) is refused */
#define SMCP_RULE_KEY       0   /* the key at all, as `name` */
#define SMCP_RULE_TYPE      1   /* a string not in `allow`, as itself */
#define SMCP_RULE_MEMBER    2   /* a key of the object not in `allow` */
#define SMCP_RULE_EQ        3   /* the string allow[0], as `name` */
#define SMCP_RULE_DATA      4   /* a string not a data: URL, as `name` */
#define SMCP_RULE_LAST      -1

struct smcp_tools_rule_s {
    int          kind;
    const char  *path[SMCP_TOOLS_LEVELS + 1];
    const char  *allow[3];
    const char  *name;
};


/*
 * Anthropic: server tools are tools with a type (web_search_20250305,
 * web_fetch_20250910, code_execution_20250522, ...; a tool the agent
 * defines has none, or "custom"), MCP servers the provider connects to,
 * a code execution container, and image and document sources the
 * provider fetches by URL (in a message or in a tool result).
 */
static const smcp_tools_rule_t  smcp_tools_anthropic[] = {
    { SMCP_RULE_TYPE, { "tools", "*", "type" }, { "custom" }, NULL },
    { SMCP_RULE_KEY, { "mcp_servers" }, { NULL }, "mcp_servers" },
    { SMCP_RULE_KEY, { "container" }, { NULL }, "container" },
    { SMCP_RULE_EQ, { "messages", "*", "content", "*", "source", "type" },
      { "url" }, "url_source" },
    { SMCP_RULE_EQ, { "messages", "*", "content", "*", "content", "*",
                      "source", "type" }, { "url" }, "url_source" },
    { SMCP_RULE_LAST, { NULL }, { NULL }, NULL }
};


/*
 * OpenAI's Responses API: tools of a type other than function and custom
 * (web_search, web_search_preview, file_search, code_interpreter, mcp,
 * image_generation, computer_use_preview, local_shell, ...), a stored
 * prompt (which may bring its own tools), images and files the provider
 * fetches by URL.
 */
static const smcp_tools_rule_t  smcp_tools_openai[] = {
    { SMCP_RULE_TYPE, { "tools", "*", "type" }, { "function", "custom" },
      NULL },
    { SMCP_RULE_KEY, { "prompt" }, { NULL }, "prompt" },
    { SMCP_RULE_DATA, { "input", "*", "content", "*", "image_url" },
      { NULL }, "image_url" },
    { SMCP_RULE_DATA, { "input", "*", "output", "*", "image_url" },
      { NULL }, "image_url" },
    { SMCP_RULE_KEY, { "input", "*", "content", "*", "file_url" },
      { NULL }, "file_url" },
    { SMCP_RULE_KEY, { "input", "*", "output", "*", "file_url" },
      { NULL }, "file_url" },
    { SMCP_RULE_LAST, { NULL }, { NULL }, NULL }
};


/* Chat Completions: tools other than functions, web_search_options,
 * plugins (OpenRouter's web search on an OpenAI-compatible server),
 * images the provider fetches by URL */
static const smcp_tools_rule_t  smcp_tools_chat[] = {
    { SMCP_RULE_TYPE, { "tools", "*", "type" }, { "function", "custom" },
      NULL },
    { SMCP_RULE_KEY, { "web_search_options" }, { NULL },
      "web_search_options" },
    { SMCP_RULE_KEY, { "plugins" }, { NULL }, "plugins" },
    { SMCP_RULE_DATA, { "messages", "*", "content", "*", "image_url", "url" },
      { NULL }, "image_url" },
    { SMCP_RULE_LAST, { NULL }, { NULL }, NULL }
};


/*
 * Gemini: a tool is an object of one member; functionDeclarations are the
 * agent's own, any other (googleSearch, google_search_retrieval,
 * urlContext, codeExecution, ...) the provider's; files by URI (fileData)
 * the provider fetches.  Both spellings of the proto's field names.
 */
static const smcp_tools_rule_t  smcp_tools_gemini[] = {
    { SMCP_RULE_MEMBER, { "tools", "*" },
      { "functionDeclarations", "function_declarations" }, NULL },
    { SMCP_RULE_KEY, { "contents", "*", "parts", "*", "fileData" }, { NULL },
      "file_data" },
    { SMCP_RULE_KEY, { "contents", "*", "parts", "*", "file_data" },
      { NULL }, "file_data" },
    { SMCP_RULE_KEY, { "systemInstruction", "parts", "*", "fileData" },
      { NULL }, "file_data" },
    { SMCP_RULE_KEY, { "system_instruction", "parts", "*", "file_data" },
      { NULL }, "file_data" },
    { SMCP_RULE_LAST, { NULL }, { NULL }, NULL }
};


/* the reader's states */
enum {
    SMCP_S_START = 0,
    SMCP_S_VALUE,
    SMCP_S_OBJ_FIRST,           /* after "{" */
    SMCP_S_OBJ_KEY,             /* after "," in an object */
    SMCP_S_COLON,
    SMCP_S_AFTER,               /* after a value */
    SMCP_S_ARR_FIRST,           /* after "[" */
    SMCP_S_STRING,
    SMCP_S_ESC,
    SMCP_S_HEX,
    SMCP_S_NUMBER,
    SMCP_S_LITERAL,
    SMCP_S_END,
    SMCP_S_FOUND,
    SMCP_S_BAD
};


/* where in a number; SMCP_N_END: it ended */
#define SMCP_N_END  -1

enum {
    SMCP_N_MINUS = 0,
    SMCP_N_ZERO,
    SMCP_N_INT,
    SMCP_N_DOT,
    SMCP_N_FRAC,
    SMCP_N_E,
    SMCP_N_ESIGN,
    SMCP_N_EXP
};


#define smcp_tools_ws(c)  ((c) == ' ' || (c) == '\t' || (c) == '\n'          \
                           || (c) == '\r')

#define smcp_tools_is_object(s, d)                                            \
    ((s)->objects[((d) - 1) / 8] & (1u << (((d) - 1) % 8)))


void
smcp_tools_init(smcp_tools_t *s, int format, smcp_tools_allowed_pt allowed,
    void *data)
{
    memset(s, 0, sizeof(smcp_tools_t));

    switch (format) {
    case SMCP_TOOLS_OPENAI:
        s->rules = smcp_tools_openai;
        break;
    case SMCP_TOOLS_CHAT:
        s->rules = smcp_tools_chat;
        break;
    case SMCP_TOOLS_GEMINI:
        s->rules = smcp_tools_gemini;
        break;
    default:
        s->rules = smcp_tools_anthropic;
        break;
    }

    s->allowed = allowed;
    s->data = data;
    s->state = SMCP_S_START;
}


static int
smcp_tools_bad(smcp_tools_t *s, const char *why)
{
    s->state = SMCP_S_BAD;
    s->error = why;

    return SMCP_TOOLS_BAD;
}


/* does the path of levels 1..len match the rule's? */
static int
smcp_tools_match(smcp_tools_t *s, const smcp_tools_rule_t *r, unsigned len)
{
    unsigned             i;
    size_t               n;
    smcp_tools_level_t  *l;

    if (len > SMCP_TOOLS_LEVELS) {
        return 0;
    }

    for (i = 1; i <= len; i++) {
        if (r->path[i - 1] == NULL) {
            return 0;
        }

        if (!smcp_tools_is_object(s, i)) {
            if (strcmp(r->path[i - 1], "*") != 0) {
                return 0;
            }

            continue;
        }

        l = &s->level[i];
        n = strlen(r->path[i - 1]);

        if (l->klen != n || memcmp(l->key, r->path[i - 1], n) != 0) {
            return 0;
        }
    }

    return r->path[len] == NULL;
}


/* appends a key to where, printable ASCII ("?" for the rest) */
static char *
smcp_tools_where_key(char *p, char *last, int dot, const char *key,
    size_t len)
{
    size_t  i;

    if (dot && p < last) {
        *p++ = '.';
    }

    for (i = 0; i < len && i < SMCP_TOOLS_KEY && p < last; i++) {
        *p++ = (key[i] >= 0x20 && key[i] < 0x7f) ? key[i] : '?';
    }

    if (len > SMCP_TOOLS_KEY && p + 3 < last) {
        memcpy(p, "...", 3);
        p += 3;
    }

    return p;
}


/* where in the body: tools[2].type */
static void
smcp_tools_where(smcp_tools_t *s, const char *key, size_t klen)
{
    char                *p, *last;
    unsigned             i;
    smcp_tools_level_t  *l;

    p = s->where;
    last = s->where + sizeof(s->where) - 8;

    for (i = 1; i <= s->depth && i <= SMCP_TOOLS_LEVELS && p < last; i++) {
        l = &s->level[i];

        if (!smcp_tools_is_object(s, i)) {
            p += snprintf(p, last - p, "[%lu]", l->index);

        } else {
            p = smcp_tools_where_key(p, last, i > 1, l->key,
                                     l->klen > SMCP_TOOLS_KEY
                                     ? SMCP_TOOLS_KEY + 1 : l->klen);
        }
    }

    if (key) {
        p = smcp_tools_where_key(p, last, 1, key, klen);
    }

    if (p >= last) {
        strcpy(last, "...");

    } else {
        *p = '\0';
    }
}


/* keeps printable ASCII of what the request said, "?" for the rest */
static void
smcp_tools_copy(char *dst, const char *src, size_t len)
{
    size_t  i;

    if (len > SMCP_TOOLS_VALUE) {
        len = SMCP_TOOLS_VALUE;
    }

    for (i = 0; i < len; i++) {
        dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
    }

    dst[len] = '\0';
}


/*
 * A tool the request asks for: allowed, or the outcome.  name: what the
 * request said; setting: a fixed name, or NULL for name without its
 * version ("_20250305", "_2025_03_11").
 */
static int
smcp_tools_found(smcp_tools_t *s, const char *name, size_t len,
    const char *setting, const char *key, size_t klen)
{
    size_t  n;

    smcp_tools_copy(s->name, name, len);

    if (setting) {
        smcp_tools_copy(s->setting, setting, strlen(setting));

    } else {
        smcp_tools_copy(s->setting, name, len);
        n = strlen(s->setting);

        while (n > 0) {
            while (n > 0 && s->setting[n - 1] >= '0'
                   && s->setting[n - 1] <= '9')
            {
                n--;
            }

            if (n == 0 || s->setting[n - 1] != '_'
                || (s->setting[n] < '0' || s->setting[n] > '9'))
            {
                n = strlen(s->setting);
                break;
            }

            s->setting[--n] = '\0';
        }
    }

    if (s->allowed && s->allowed(s->data, s->setting, strlen(s->setting))) {
        return SMCP_TOOLS_OK;
    }

    smcp_tools_where(s, key, klen);
    s->state = SMCP_S_FOUND;

    return SMCP_TOOLS_FOUND;
}


/* a value starts at the current depth: the rules of its path */
static int
smcp_tools_value(smcp_tools_t *s, unsigned char c)
{
    const smcp_tools_rule_t  *r;

    s->watch = NULL;

    for (r = s->rules; r->kind != SMCP_RULE_LAST; r++) {

        if (r->kind == SMCP_RULE_MEMBER || !smcp_tools_match(s, r, s->depth)) {
            continue;
        }

        if (r->kind == SMCP_RULE_KEY) {
            if (smcp_tools_found(s, r->name, strlen(r->name), r->name, NULL,
                                 0)
                == SMCP_TOOLS_FOUND)
            {
                return SMCP_TOOLS_FOUND;
            }

            continue;
        }

        if (c != '"') {
            if (r->kind == SMCP_RULE_TYPE) {
                return smcp_tools_bad(s, "a tool's type is not a string");
            }

            continue;
        }

        s->watch = r;
        break;
    }

    return SMCP_TOOLS_OK;
}


/* a key is read: kept for the path; the rules of its object */
static int
smcp_tools_key(smcp_tools_t *s)
{
    unsigned                  i;
    const smcp_tools_rule_t  *r;
    smcp_tools_level_t       *l;

    if (memchr(s->buf, '\0', s->len > SMCP_TOOLS_VALUE ? SMCP_TOOLS_VALUE
                                                        : s->len))
    {
        return smcp_tools_bad(s, "a key holds U+0000");
    }

    if (s->depth <= SMCP_TOOLS_LEVELS) {
        l = &s->level[s->depth];
        l->klen = s->len;
        memcpy(l->key, s->buf,
               s->len < SMCP_TOOLS_KEY ? s->len : SMCP_TOOLS_KEY);
    }

    for (r = s->rules; r->kind != SMCP_RULE_LAST; r++) {

        if (r->kind != SMCP_RULE_MEMBER
            || !smcp_tools_match(s, r, s->depth - 1))
        {
            continue;
        }

        for (i = 0; r->allow[i]; i++) {
            if (s->len == strlen(r->allow[i])
                && memcmp(s->buf, r->allow[i], s->len) == 0)
            {
                break;
            }
        }

        if (r->allow[i] == NULL) {
            /* the object's own path, and the key */
            s->depth--;
            i = smcp_tools_found(s, s->buf, s->len, NULL, s->buf, s->len);
            s->depth++;

            if (i == SMCP_TOOLS_FOUND) {
                return SMCP_TOOLS_FOUND;
            }
        }
    }

    return SMCP_TOOLS_OK;
}


/* a string value is read: the rule watching it */
static int
smcp_tools_string(smcp_tools_t *s)
{
    unsigned                  i;
    const smcp_tools_rule_t  *r;

    r = s->watch;
    s->watch = NULL;

    if (r == NULL) {
        return SMCP_TOOLS_OK;
    }

    switch (r->kind) {

    case SMCP_RULE_TYPE:
        for (i = 0; r->allow[i]; i++) {
            if (s->len == strlen(r->allow[i])
                && memcmp(s->buf, r->allow[i], s->len) == 0)
            {
                return SMCP_TOOLS_OK;
            }
        }

        return smcp_tools_found(s, s->buf, s->len, NULL, NULL, 0);

    case SMCP_RULE_EQ:
        if (s->len == strlen(r->allow[0])
            && memcmp(s->buf, r->allow[0], s->len) == 0)
        {
            return smcp_tools_found(s, r->name, strlen(r->name), r->name,
                                    NULL, 0);
        }

        return SMCP_TOOLS_OK;

    default: /* SMCP_RULE_DATA */
        if (s->len >= 5 && strncasecmp(s->buf, "data:", 5) == 0) {
            return SMCP_TOOLS_OK;
        }

        return smcp_tools_found(s, r->name, strlen(r->name), r->name,
                                NULL, 0);
    }
}


static void
smcp_tools_put(smcp_tools_t *s, unsigned char c)
{
    if (s->keep && s->len < SMCP_TOOLS_VALUE) {
        s->buf[s->len] = (char) c;
    }

    s->len++;
}


/* a code point of \uXXXX, as UTF-8 */
static int
smcp_tools_code_point(smcp_tools_t *s, unsigned cp)
{
    if (s->high) {
        if (cp < 0xdc00 || cp > 0xdfff) {
            return smcp_tools_bad(s, "a lone surrogate in a \\u escape");
        }

        cp = 0x10000 + ((s->high - 0xd800) << 10) + (cp - 0xdc00);
        s->high = 0;

    } else if (cp >= 0xd800 && cp <= 0xdbff) {
        s->high = cp;
        return SMCP_TOOLS_OK;

    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
        return smcp_tools_bad(s, "a lone surrogate in a \\u escape");
    }

    if (cp < 0x80) {
        smcp_tools_put(s, cp);

    } else if (cp < 0x800) {
        smcp_tools_put(s, 0xc0 | (cp >> 6));
        smcp_tools_put(s, 0x80 | (cp & 0x3f));

    } else if (cp < 0x10000) {
        smcp_tools_put(s, 0xe0 | (cp >> 12));
        smcp_tools_put(s, 0x80 | ((cp >> 6) & 0x3f));
        smcp_tools_put(s, 0x80 | (cp & 0x3f));

    } else {
        smcp_tools_put(s, 0xf0 | (cp >> 18));
        smcp_tools_put(s, 0x80 | ((cp >> 12) & 0x3f));
        smcp_tools_put(s, 0x80 | ((cp >> 6) & 0x3f));
        smcp_tools_put(s, 0x80 | (cp & 0x3f));
    }

    return SMCP_TOOLS_OK;
}


/* a byte of a string as sent: UTF-8, no control byte */
static int
smcp_tools_raw(smcp_tools_t *s, unsigned char c)
{
    if (s->utf8_need) {
        if (c < s->utf8_lo || c > s->utf8_hi) {
            return smcp_tools_bad(s, "invalid UTF-8 in a string");
        }

        s->utf8_need--;
        s->utf8_lo = 0x80;
        s->utf8_hi = 0xbf;
        smcp_tools_put(s, c);

        return SMCP_TOOLS_OK;
    }

    if (c < 0x20) {
        return smcp_tools_bad(s, "a control byte in a string");
    }

    if (c >= 0x80) {
        s->utf8_lo = 0x80;
        s->utf8_hi = 0xbf;

        if (c >= 0xc2 && c <= 0xdf) {
            s->utf8_need = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            s->utf8_need = 2;
            if (c == 0xe0) {
                s->utf8_lo = 0xa0;
            } else if (c == 0xed) {
                s->utf8_hi = 0x9f;
            }
        } else if (c >= 0xf0 && c <= 0xf4) {
            s->utf8_need = 3;
            if (c == 0xf0) {
                s->utf8_lo = 0x90;
            } else if (c == 0xf4) {
                s->utf8_hi = 0x8f;
            }
        } else {
            return smcp_tools_bad(s, "invalid UTF-8 in a string");
        }
    }

    smcp_tools_put(s, c);

    return SMCP_TOOLS_OK;
}


static int
smcp_tools_push(smcp_tools_t *s, int object)
{
    unsigned  d;

    if (s->depth >= SMCP_TOOLS_DEPTH) {
        return smcp_tools_bad(s, "JSON nested deeper than the egress reads");
    }

    d = ++s->depth;

    if (object) {
        s->objects[(d - 1) / 8] |= (unsigned char) (1u << ((d - 1) % 8));
    } else {
        s->objects[(d - 1) / 8] &= (unsigned char) ~(1u << ((d - 1) % 8));
    }

    if (d <= SMCP_TOOLS_LEVELS) {
        s->level[d].klen = SMCP_TOOLS_KEY + 1;
        s->level[d].index = 0;
    }

    s->state = object ? SMCP_S_OBJ_FIRST : SMCP_S_ARR_FIRST;

    return SMCP_TOOLS_OK;
}


/*
 * A byte of a number (RFC 8259's grammar): SMCP_TOOLS_OK when it is one,
 * SMCP_N_END when the number ended before it, or final.
 */
static int
smcp_tools_number(smcp_tools_t *s, unsigned char c)
{
    int  digit;

    digit = (c >= '0' && c <= '9');

    switch (s->sub) {

    case SMCP_N_MINUS:
        if (digit) {
            s->sub = (c == '0') ? SMCP_N_ZERO : SMCP_N_INT;
            return SMCP_TOOLS_OK;
        }
        break;

    case SMCP_N_INT:
        if (digit) {
            return SMCP_TOOLS_OK;
        }
        /* fall through */

    case SMCP_N_ZERO:
        if (c == '.') {
            s->sub = SMCP_N_DOT;
            return SMCP_TOOLS_OK;
        }
        /* fall through */

    case SMCP_N_FRAC:
        if (digit && s->sub == SMCP_N_FRAC) {
            return SMCP_TOOLS_OK;
        }

        if (c == 'e' || c == 'E') {
            s->sub = SMCP_N_E;
            return SMCP_TOOLS_OK;
        }

        return SMCP_N_END;

    case SMCP_N_DOT:
        if (digit) {
            s->sub = SMCP_N_FRAC;
            return SMCP_TOOLS_OK;
        }
        break;

    case SMCP_N_E:
        if (c == '+' || c == '-') {
            s->sub = SMCP_N_ESIGN;
            return SMCP_TOOLS_OK;
        }
        /* fall through */

    case SMCP_N_ESIGN:
        if (digit) {
            s->sub = SMCP_N_EXP;
            return SMCP_TOOLS_OK;
        }
        break;

    default: /* SMCP_N_EXP */
        if (digit) {
            return SMCP_TOOLS_OK;
        }

        return SMCP_N_END;
    }

    return smcp_tools_bad(s, "not a JSON number");
}


static void
smcp_tools_string_start(smcp_tools_t *s, int key)
{
    s->state = SMCP_S_STRING;
    s->in_key = key;
    s->keep = key || s->watch != NULL;
    s->len = 0;
    s->high = 0;
    s->utf8_need = 0;
}


/* one byte; SMCP_TOOLS_OK or final */
static int
smcp_tools_byte(smcp_tools_t *s, unsigned char c)
{
    int  rc, v;

again:

    switch (s->state) {

    case SMCP_S_START:
        if (smcp_tools_ws(c)) {
            return SMCP_TOOLS_OK;
        }

        if (c != '{') {
            return smcp_tools_bad(s, "the body is not a JSON object");
        }

        return smcp_tools_push(s, 1);

    case SMCP_S_VALUE:
        if (smcp_tools_ws(c)) {
            return SMCP_TOOLS_OK;
        }

        rc = smcp_tools_value(s, c);
        if (rc != SMCP_TOOLS_OK) {
            return rc;
        }

        if (c == '{' || c == '[') {
            return smcp_tools_push(s, c == '{');
        }

        if (c == '"') {
            smcp_tools_string_start(s, 0);
            return SMCP_TOOLS_OK;
        }

        if (c == '-' || (c >= '0' && c <= '9')) {
            s->state = SMCP_S_NUMBER;
            s->sub = (c == '-') ? SMCP_N_MINUS
                     : (c == '0') ? SMCP_N_ZERO : SMCP_N_INT;
            return SMCP_TOOLS_OK;
        }

        s->literal = (c == 't') ? "true" : (c == 'f') ? "false"
                     : (c == 'n') ? "null" : NULL;

        if (s->literal == NULL) {
            return smcp_tools_bad(s, "not a JSON value");
        }

        s->sub = 1;
        s->state = SMCP_S_LITERAL;
        return SMCP_TOOLS_OK;

    case SMCP_S_OBJ_FIRST:
    case SMCP_S_OBJ_KEY:
        if (smcp_tools_ws(c)) {
            return SMCP_TOOLS_OK;
        }

        if (c == '"') {
            smcp_tools_string_start(s, 1);
            return SMCP_TOOLS_OK;
        }

        if (c == '}' && s->state == SMCP_S_OBJ_FIRST) {
            s->depth--;
            s->state = SMCP_S_AFTER;
            return SMCP_TOOLS_OK;
        }

        return smcp_tools_bad(s, "an object's member does not start with a "
                                 "key");

    case SMCP_S_COLON:
        if (smcp_tools_ws(c)) {
            return SMCP_TOOLS_OK;
        }

        if (c != ':') {
            return smcp_tools_bad(s, "no \":\" after a key");
        }

        s->state = SMCP_S_VALUE;
        return SMCP_TOOLS_OK;

    case SMCP_S_ARR_FIRST:
        if (smcp_tools_ws(c)) {
            return SMCP_TOOLS_OK;
        }

        if (c == ']') {
            s->depth--;
            s->state = SMCP_S_AFTER;
            return SMCP_TOOLS_OK;
        }

        s->state = SMCP_S_VALUE;
        goto again;

    case SMCP_S_AFTER:
        if (smcp_tools_ws(c)) {
            return SMCP_TOOLS_OK;
        }

        if (s->depth == 0) {
            return smcp_tools_bad(s, "text after the JSON object");
        }

        if (smcp_tools_is_object(s, s->depth)) {
            if (c == ',') {
                s->state = SMCP_S_OBJ_KEY;
                return SMCP_TOOLS_OK;
            }

            if (c == '}') {
                s->depth--;
                return SMCP_TOOLS_OK;
            }

            return smcp_tools_bad(s, "no \",\" or \"}\" after a member");
        }

        if (c == ',') {
            if (s->depth <= SMCP_TOOLS_LEVELS) {
                s->level[s->depth].index++;
            }

            s->state = SMCP_S_VALUE;
            return SMCP_TOOLS_OK;
        }

        if (c == ']') {
            s->depth--;
            return SMCP_TOOLS_OK;
        }

        return smcp_tools_bad(s, "no \",\" or \"]\" after an element");

    case SMCP_S_STRING:
        if (s->utf8_need == 0 && c == '"' && s->high == 0) {
            if (s->in_key) {
                s->state = SMCP_S_COLON;
                return smcp_tools_key(s);
            }

            s->state = SMCP_S_AFTER;
            return smcp_tools_string(s);
        }

        if (s->utf8_need == 0 && c == '\\') {
            s->state = SMCP_S_ESC;
            return SMCP_TOOLS_OK;
        }

        if (s->high) {
            return smcp_tools_bad(s, "a lone surrogate in a \\u escape");
        }

        return smcp_tools_raw(s, c);

    case SMCP_S_ESC:
        s->state = SMCP_S_STRING;

        if (c == 'u') {
            s->state = SMCP_S_HEX;
            s->sub = 0;
            s->hex = 0;
            return SMCP_TOOLS_OK;
        }

        if (s->high) {
            return smcp_tools_bad(s, "a lone surrogate in a \\u escape");
        }

        switch (c) {
        case '"': case '\\': case '/':
            smcp_tools_put(s, c);
            return SMCP_TOOLS_OK;
        case 'b': smcp_tools_put(s, '\b'); return SMCP_TOOLS_OK;
        case 'f': smcp_tools_put(s, '\f'); return SMCP_TOOLS_OK;
        case 'n': smcp_tools_put(s, '\n'); return SMCP_TOOLS_OK;
        case 'r': smcp_tools_put(s, '\r'); return SMCP_TOOLS_OK;
        case 't': smcp_tools_put(s, '\t'); return SMCP_TOOLS_OK;
        }

        return smcp_tools_bad(s, "an unknown escape in a string");

    case SMCP_S_HEX:
        v = smcp_hex_value(c);

        if (v < 0) {
            return smcp_tools_bad(s, "a broken \\u escape");
        }

        s->hex = s->hex << 4 | (unsigned) v;

        if (++s->sub < 4) {
            return SMCP_TOOLS_OK;
        }

        s->state = SMCP_S_STRING;
        return smcp_tools_code_point(s, s->hex);

    case SMCP_S_NUMBER:
        rc = smcp_tools_number(s, c);
        if (rc != SMCP_N_END) {
            return rc;
        }

        s->state = SMCP_S_AFTER;
        goto again;

    case SMCP_S_LITERAL:
        if (s->literal[s->sub] == '\0') {
            s->state = SMCP_S_AFTER;
            goto again;
        }

        if (c != (unsigned char) s->literal[s->sub++]) {
            return smcp_tools_bad(s, "not a JSON value");
        }

        return SMCP_TOOLS_OK;

    case SMCP_S_FOUND:
        return SMCP_TOOLS_FOUND;

    default: /* SMCP_S_BAD */
        return SMCP_TOOLS_BAD;
    }
}


int
smcp_tools_feed(smcp_tools_t *s, const unsigned char *p, size_t n)
{
    int     rc;
    size_t  i;

    for (i = 0; i < n; i++) {

        /* the bulk of a body: string bytes nobody looks at */
        if (s->state == SMCP_S_STRING && !s->keep && s->utf8_need == 0
            && s->high == 0)
        {
            while (i < n && p[i] >= 0x20 && p[i] < 0x80 && p[i] != '"'
                   && p[i] != '\\')
            {
                i++;
            }

            if (i == n) {
                break;
            }
        }

        rc = smcp_tools_byte(s, p[i]);

        if (rc != SMCP_TOOLS_OK) {
            s->offset += i;
            return rc;
        }
    }

    s->offset += n;

    return (s->state == SMCP_S_FOUND) ? SMCP_TOOLS_FOUND
           : (s->state == SMCP_S_BAD) ? SMCP_TOOLS_BAD : SMCP_TOOLS_OK;
}


int
smcp_tools_end(smcp_tools_t *s)
{
    if (s->state == SMCP_S_FOUND) {
        return SMCP_TOOLS_FOUND;
    }

    if (s->state == SMCP_S_BAD) {
        return SMCP_TOOLS_BAD;
    }

    if (s->state != SMCP_S_AFTER || s->depth != 0) {
        return smcp_tools_bad(s, "the JSON object does not end");
    }

    return SMCP_TOOLS_OK;
}


int
smcp_tools_name_is(const char *setting, size_t slen, const char *name,
    size_t len)
{
    size_t  i, j;
    char    a, b;

    i = 0;
    j = 0;

    for ( ;; ) {
        while (i < slen && setting[i] == '_') {
            i++;
        }

        while (j < len && name[j] == '_') {
            j++;
        }

        if (i == slen || j == len) {
            return i == slen && j == len;
        }

        a = setting[i++];
        b = name[j++];

        a = (a >= 'A' && a <= 'Z') ? a + 32 : a;
        b = (b >= 'A' && b <= 'Z') ? b + 32 : b;

        if (a != b) {
            return 0;
        }
    }
}
