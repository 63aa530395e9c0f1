/*
 * smcp-embed: the project's data files (Lua scripts, tool definitions)
 * embedded into a C header, and checked on the way: a file that does not
 * hold what it must stops the build, naming the file.
 *
 *   smcp-embed lua OUT.h DIR     every DIR/NAME.lua becomes
 *                                static const char smcp_lua_NAME[]
 *   smcp-embed tools OUT.h DIR   every DIR/NAME.json (an MCP tool
 *                                definition) becomes
 *                                static const char smcp_tool_NAME[]
 *   smcp-embed ui OUT.h DIR      every file of DIR and of DIR/static (the
 *                                dashboard) becomes an entry of
 *                                static const smcp_ui_file_t
 *                                smcp_ui_files[] (path, content type,
 *                                ETag, bytes, length); pages laid out
 *
 *   smcp-embed html OUT.h DIR    every DIR/NAME.html (a page with
 *                                {{name}} placeholders), laid out,
 *                                becomes static const char smcp_html_NAME[]
 *   smcp-embed css OUT.h DIR     every DIR/NAME.css becomes
 *                                static const char smcp_css_NAME[]
 *   smcp-embed page DIR/NAME.html   the page as it is served, to stdout
 *   smcp-embed perl OUT.h FILE...   every FILE (a Perl program the runner
 *                                starts in a container: runner/egress-relay)
 *                                becomes static const char smcp_perl_NAME[],
 *                                NAME its file name with '_' for '-'
 *
 * lua, tools, html and css also define an X-macro listing the names
 * (SMCP_LUA_SCRIPTS(X), SMCP_TOOLS(X), SMCP_HTML(X), SMCP_CSS(X)).
 *
 * Perl: the first line is a "#!" line naming perl, and the program says
 * "use strict;" (it runs as `perl -e TEXT`, so no other check catches a
 * file that is not one).
 * Entries come in the order of their file names.
 *
 * UI: a name is [a-z0-9_.-], starts with a letter or digit, and ends in a
 * known extension (its content type); anything else in the directories
 * (but DIR/layouts/), or a file that cannot be read, stops the build.
 * Bytes are embedded as they are (binary files too; DIR/NAME.html laid
 * out); the ETag is the FNV-1a hash of them.
 *
 * Lua: NAME is [a-z0-9_]; the opening comment block holds a line starting
 * "-- KEYS" and one starting "-- ARGV" (what the script is handed).  A
 * line "--@include NAME" is replaced by the code of DIR/lib/NAME.lua (a
 * library of local functions, not a script: it includes nothing itself),
 * from its first line after its opening comment; any other line starting
 * "--@", an unknown NAME or an include in a library stops the build,
 * naming the file and line.  The text is embedded as it is otherwise
 * (Redis reports errors with the line numbers of the text with its
 * libraries in).
 *
 * Tools: one JSON object (no duplicate keys) with name (= NAME), title,
 * description, inputSchema (type "object", properties, additionalProperties
 * false, required naming properties), outputSchema (type "object") and
 * optionally annotations (booleans) and execution (taskSupport one of
 * "forbidden", "optional", "required").  An object {"$include": "FILE"}
 * anywhere in it is replaced by the JSON of DIR/include/FILE.  Embedded
 * compact.
 *
 * Layouts: the pages of a family share one head and frame, written once
 * in DIR/layouts/NAME.html with slots {{$slot}}.  A page built on it
 * starts with a line "{{<NAME}}" and then holds only blocks
 * "{{$slot}}...{{/slot}}", one for each slot of the layout (an empty one
 * is "{{$slot}}{{/slot}}"); a newline right after "{{$slot}}" is not the
 * block's.  A slot alone on its line of the layout takes the block's lines
 * (an empty block: the line goes); a slot within a line takes a one-line
 * block.  A missing layout, a slot not filled, a block without its slot
 * or a block not closed stops the build, naming the page.
 *
 * HTML (laid out): starts with "<!doctype html>" (any case); every "{{"
 * opens a placeholder of 1-32 characters of [a-z_] closed by "}}" (the
 * server fills them in, escaped; a dashboard page has none); no <style>,
 * and every script is "<script ... src=...></script>" (the CSP refuses
 * inline ones).  CSS: no "<" (it is served as a file, but never lets a
 * page's markup be closed by a style).
 *
 * Used by the `config` script (through config.make, in nginx's Makefile)
 * and by the project's Makefile.  Plain C and jansson.
 */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>


#define EMBED_MAX_FILES     256
#define EMBED_MAX_NAME      64
#define EMBED_MAX_SIZE      (1024 * 1024)
#define EMBED_MAX_INCLUDES  8       /* nesting of $include */
#define EMBED_MAX_BLOCKS    16      /* a page's blocks (its layout's slots) */
#define EMBED_LUA_INCLUDE   "--@include "   /* a Lua script's include line */
#define EMBED_LINE          72      /* characters per C string line of
                                       JSON (Lua: one per line of text) */


typedef enum {
    EMBED_LUA,
    EMBED_TOOLS,
    EMBED_UI,
    EMBED_HTML,
    EMBED_CSS
} embed_kind_e;


/* a block {{$name}}...{{/name}} of a page: pointers into its text */
typedef struct {
    const char  *name;
    size_t       name_len;
    const char  *text;
    size_t       len;
    int          used;
} embed_block_t;


/* the dashboard's file types: extension and Content-Type */
static const char  *embed_ui_types[][2] = {
    { ".html", "text/html; charset=utf-8" },
    { ".css", "text/css; charset=utf-8" },
    { ".js", "text/javascript; charset=utf-8" },
    { ".json", "application/json" },
    { ".svg", "image/svg+xml" },
    { ".png", "image/png" },
    { ".ico", "image/x-icon" },
    { ".webp", "image/webp" },
    { ".txt", "text/plain; charset=utf-8" },
    { ".woff2", "font/woff2" }
};


static char  embed_tmp[4096];      /* the output being written: "" none */


static void
embed_fail(const char *file, const char *fmt, ...)
{
    va_list  ap;

    fprintf(stderr, "smcp-embed: %s: ", file);

    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);

    fputc('\n', stderr);

    if (embed_tmp[0] != '\0') {
        remove(embed_tmp);
    }

    exit(1);
}


/* OUT.h is written as OUT.h.tmp, removed by embed_fail() */
static FILE *
embed_out_open(const char *out_path)
{
    FILE  *out;

    snprintf(embed_tmp, sizeof(embed_tmp), "%s.tmp", out_path);

    out = fopen(embed_tmp, "w");
    if (out == NULL) {
        embed_fail(embed_tmp, "%s", strerror(errno));
    }

    return out;
}


/* then moved into place, whole */
static void
embed_out_close(FILE *out, const char *out_path)
{
    if (fclose(out) != 0) {
        embed_fail(embed_tmp, "%s", strerror(errno));
    }

    if (rename(embed_tmp, out_path) != 0) {
        embed_fail(out_path, "%s", strerror(errno));
    }
}


static char *
embed_read_bytes(const char *path, size_t *len, int text)
{
    char   *buf;
    FILE   *f;
    size_t  n;

    f = fopen(path, "rb");
    if (f == NULL) {
        embed_fail(path, "%s", strerror(errno));
    }

    buf = malloc(EMBED_MAX_SIZE + 1);
    if (buf == NULL) {
        embed_fail(path, "out of memory");
    }

    n = fread(buf, 1, EMBED_MAX_SIZE + 1, f);

    if (ferror(f)) {
        embed_fail(path, "%s", strerror(errno));
    }

    fclose(f);

    if (n > EMBED_MAX_SIZE) {
        embed_fail(path, "larger than %d bytes", EMBED_MAX_SIZE);
    }

    if (text && memchr(buf, '\0', n) != NULL) {
        embed_fail(path, "holds a NUL byte");
    }

    buf[n] = '\0';
    *len = n;

    return buf;
}


static int
embed_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}


static char *
embed_read(const char *path, size_t *len)
{
    return embed_read_bytes(path, len, 1);
}


static void
embed_append(const char *path, char *out, size_t *len, const char *s,
    size_t n)
{
    if (*len + n > EMBED_MAX_SIZE) {
        embed_fail(path, "larger than %d bytes once put together",
                   EMBED_MAX_SIZE);
    }

    memcpy(out + *len, s, n);
    *len += n;
}


/* the names (without the suffix) of DIR's files ending in suffix, sorted */
static size_t
embed_list(const char *dir, const char *suffix, char **names)
{
    DIR            *d;
    char           *name;
    size_t          n, len, slen;
    struct dirent  *de;

    d = opendir(dir);
    if (d == NULL) {
        embed_fail(dir, "%s", strerror(errno));
    }

    n = 0;
    slen = strlen(suffix);

    while ((de = readdir(d)) != NULL) {
        len = strlen(de->d_name);

        if (de->d_name[0] == '.' || len <= slen
            || strcmp(de->d_name + len - slen, suffix) != 0)
        {
            continue;
        }

        if (n == EMBED_MAX_FILES) {
            embed_fail(dir, "more than %d files", EMBED_MAX_FILES);
        }

        name = strndup(de->d_name, len - slen);
        if (name == NULL) {
            embed_fail(dir, "out of memory");
        }

        names[n++] = name;
    }

    closedir(d);

    qsort(names, n, sizeof(char *), embed_cmp);

    return n;
}


/* a file name usable in a C identifier */
static void
embed_check_name(const char *path, const char *name)
{
    const char  *p;

    if (strlen(name) > EMBED_MAX_NAME) {
        embed_fail(path, "the name is longer than %d characters",
                   EMBED_MAX_NAME);
    }

    for (p = name; *p; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')
              || *p == '_'))
        {
            embed_fail(path, "the name may hold a-z, 0-9 and _ only");
        }
    }
}


/* the text as C string literals: one per line of text, and every wrap
 * characters if wrap is not 0 */
static void
embed_string(FILE *out, const char *s, size_t len, size_t wrap)
{
    size_t         i, col;
    unsigned char  c;

    fputs("    \"", out);
    col = 0;

    for (i = 0; i < len; i++) {
        c = (unsigned char) s[i];

        if (c == '\\' || c == '"') {
            fprintf(out, "\\%c", c);
            col += 2;

        } else if (c == '?') {
            /* never a trigraph */
            fputs("\\?", out);
            col += 2;

        } else if (c == '\n') {
            fputs("\\n", out);

            if (i + 1 < len) {
                fputs("\"\n    \"", out);
            }

            col = 0;
            continue;

        } else if (c < 0x20 || c >= 0x7f) {
            fprintf(out, "\\%03o", c);
            col += 4;

        } else {
            fputc(c, out);
            col++;
        }

        if (wrap && col >= wrap && i + 1 < len && s[i + 1] != '\n') {
            fputs("\"\n    \"", out);
            col = 0;
        }
    }

    fputs("\"", out);
}


/* Lua: the opening comment block names KEYS and ARGV */
static void
embed_check_lua(const char *path, const char *text)
{
    int          keys, argv, code;
    const char  *line, *p;

    keys = 0;
    argv = 0;
    code = 0;

    for (line = text; *line; line = p + 1) {
        p = line;

        while (*p == ' ' || *p == '\t') {
            p++;
        }

        if (*p == '\n') {
            continue;
        }

        if (strncmp(p, "--", 2) != 0) {
            code = 1;
            break;
        }

        p += 2;

        while (*p == ' ') {
            p++;
        }

        if (strncmp(p, "KEYS", 4) == 0) {
            keys = 1;
        }

        if (strncmp(p, "ARGV", 4) == 0) {
            argv = 1;
        }

        p = strchr(p, '\n');
        if (p == NULL) {
            break;
        }
    }

    if (!keys || !argv) {
        embed_fail(path, "the opening comment must say what the script is "
                   "handed: a line \"-- KEYS ...\" and a line "
                   "\"-- ARGV ...\"");
    }

    if (!code) {
        embed_fail(path, "no code after the opening comment");
    }
}


/* Lua: the line at p starts "--@" (after blanks): an include line */
static int
embed_lua_directive(const char *p)
{
    while (*p == ' ' || *p == '\t') {
        p++;
    }

    return strncmp(p, "--@", 3) == 0;
}


/* Lua: NAME's length if the line at p is exactly "--@include NAME",
 * else 0 */
static size_t
embed_lua_include(const char *p)
{
    size_t  n;

    if (strncmp(p, EMBED_LUA_INCLUDE, sizeof(EMBED_LUA_INCLUDE) - 1) != 0) {
        return 0;
    }

    p += sizeof(EMBED_LUA_INCLUDE) - 1;
    n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");

    if (n == 0 || n > EMBED_MAX_NAME || (p[n] != '\n' && p[n] != '\0')) {
        return 0;
    }

    return n;
}


/* Lua: a library (DIR/lib/NAME.lua) includes nothing */
static void
embed_check_lua_lib(const char *file, const char *text, const char *path)
{
    int          line;
    const char  *p;

    for (p = text, line = 1; p != NULL && *p; line++) {
        if (embed_lua_directive(p)) {
            embed_fail(file, "line %d: an include in a library (included by "
                       "%s): libraries do not nest", line, path);
        }

        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
}


/* Lua: a library's text from its first line of code (a line "--[" is
 * one: it may open a long comment); its opening comment stays in its file
 * (a script with its libraries stays within the 16 KiB Redis takes from a
 * client not authenticated yet: common/scripts/README.md) */
static const char *
embed_lua_code(const char *text)
{
    const char  *line, *p;

    for (line = text; *line; line = p + 1) {
        p = line + strspn(line, " \t");

        if (*p != '\n' && (strncmp(p, "--", 2) != 0 || p[2] == '[')) {
            break;
        }

        p = strchr(p, '\n');
        if (p == NULL) {
            break;
        }
    }

    return line;
}


/* Lua: the script with each line "--@include NAME" replaced by the code of
 * DIR/lib/NAME.lua; any other line starting "--@" stops the build */
static char *
embed_lua_expand(const char *path, const char *dir, const char *text,
    size_t *len)
{
    int          line;
    char         file[4096], *out, *lib;
    size_t       n, llen;
    const char  *p, *end, *name, *code;

    out = malloc(EMBED_MAX_SIZE + 1);
    if (out == NULL) {
        embed_fail(path, "out of memory");
    }

    *len = 0;

    for (p = text, line = 1; *p; p = end, line++) {
        end = strchr(p, '\n');
        end = end ? end + 1 : p + strlen(p);

        if (!embed_lua_directive(p)) {
            embed_append(path, out, len, p, end - p);
            continue;
        }

        n = embed_lua_include(p);
        name = p + sizeof(EMBED_LUA_INCLUDE) - 1;

        if (n == 0) {
            embed_fail(path, "line %d: a line starting \"--@\" is an "
                       "include: exactly \"--@include NAME\", NAME of a-z, "
                       "0-9 and _ (the file %s/lib/NAME.lua)", line, dir);
        }

        snprintf(file, sizeof(file), "%s/lib/%.*s.lua", dir, (int) n, name);

        if (access(file, R_OK) != 0) {
            embed_fail(path, "line %d: unknown include \"%.*s\": %s: %s",
                       line, (int) n, name, file, strerror(errno));
        }

        lib = embed_read(file, &llen);
        embed_check_lua_lib(file, lib, path);

        code = embed_lua_code(lib);
        llen -= code - lib;
        embed_append(path, out, len, code, llen);

        if (llen > 0 && code[llen - 1] != '\n') {
            embed_append(path, out, len, "\n", 1);
        }

        free(lib);
    }

    out[*len] = '\0';

    return out;
}


/* {"$include": "FILE"} anywhere in v: replaced by DIR/include/FILE */
static json_t *
embed_expand(const char *path, const char *dir, json_t *v, int depth)
{
    char          file[4096];
    json_t       *inc, *sub, *e;
    size_t        i;
    const char   *key, *name;
    json_error_t  err;

    if (json_is_array(v)) {
        json_array_foreach(v, i, e) {
            sub = embed_expand(path, dir, e, depth);
            if (sub != e) {
                json_array_set_new(v, i, sub);
            }
        }

        return v;
    }

    if (!json_is_object(v)) {
        return v;
    }

    inc = json_object_get(v, "$include");

    if (inc == NULL) {
        json_object_foreach(v, key, e) {
            sub = embed_expand(path, dir, e, depth);
            if (sub != e) {
                json_object_set_new(v, key, sub);
            }
        }

        return v;
    }

    name = json_string_value(inc);

    if (json_object_size(v) != 1 || name == NULL
        || strchr(name, '/') != NULL || name[0] == '.')
    {
        embed_fail(path, "an $include is an object with that one key, "
                   "naming a file of %s/include/", dir);
    }

    if (depth >= EMBED_MAX_INCLUDES) {
        embed_fail(path, "$include nested more than %d deep",
                   EMBED_MAX_INCLUDES);
    }

    snprintf(file, sizeof(file), "%s/include/%s", dir, name);

    sub = json_load_file(file, JSON_REJECT_DUPLICATES, &err);

    if (sub == NULL && err.line < 1) {
        embed_fail(path, "$include \"%s\": %s", name, err.text);
    }

    if (sub == NULL) {
        embed_fail(file, "line %d, column %d: %s", err.line, err.column,
                   err.text);
    }

    return embed_expand(file, dir, sub, depth + 1);
}


static const char *
embed_string_member(const char *path, json_t *o, const char *where,
    const char *key)
{
    const char  *s;

    s = json_string_value(json_object_get(o, key));

    if (s == NULL || *s == '\0') {
        embed_fail(path, "%s\"%s\" must be a non-empty string", where, key);
    }

    return s;
}


static void
embed_check_schema(const char *path, json_t *schema, const char *which,
    int input)
{
    json_t      *props, *req, *v, *add;
    size_t       i;
    const char  *key, *type;

    if (!json_is_object(schema)) {
        embed_fail(path, "\"%s\" must be an object", which);
    }

    type = json_string_value(json_object_get(schema, "type"));
    props = json_object_get(schema, "properties");

    if (type == NULL || strcmp(type, "object") != 0
        || !json_is_object(props))
    {
        embed_fail(path, "\"%s\" must have type \"object\" and an object "
                   "of properties", which);
    }

    json_object_foreach(props, key, v) {
        if (!json_is_object(v)) {
            embed_fail(path, "%s property \"%s\" must be a schema object",
                       which, key);
        }

        if (input && json_object_get(v, "type") == NULL) {
            embed_fail(path, "%s property \"%s\" needs a type", which, key);
        }
    }

    req = json_object_get(schema, "required");

    if (req != NULL) {
        if (!json_is_array(req)) {
            embed_fail(path, "%s \"required\" must be an array", which);
        }

        json_array_foreach(req, i, v) {
            key = json_string_value(v);

            if (key == NULL || json_object_get(props, key) == NULL) {
                embed_fail(path, "%s \"required\" names \"%s\", which is "
                           "not among its properties", which,
                           key ? key : "(not a string)");
            }
        }
    }

    add = json_object_get(schema, "additionalProperties");

    if (input && !json_is_false(add)) {
        embed_fail(path, "%s must say \"additionalProperties\": false "
                   "(unknown arguments are refused)", which);
    }
}


/* a tool definition, expanded; returns it compact (malloc'd) */
static char *
embed_check_tool(const char *path, const char *dir, const char *name)
{
    char          *text;
    json_t        *tool, *ann, *exec, *v;
    const char    *key, *task;
    json_error_t   err;

    tool = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (tool == NULL) {
        embed_fail(path, "line %d, column %d: %s", err.line, err.column,
                   err.text);
    }

    if (!json_is_object(tool)) {
        embed_fail(path, "a tool definition is one JSON object");
    }

    tool = embed_expand(path, dir, tool, 0);

    if (strcmp(embed_string_member(path, tool, "", "name"), name) != 0) {
        embed_fail(path, "\"name\" must be \"%s\", the file's name", name);
    }

    (void) embed_string_member(path, tool, "", "title");
    (void) embed_string_member(path, tool, "", "description");

    embed_check_schema(path, json_object_get(tool, "inputSchema"),
                       "inputSchema", 1);
    embed_check_schema(path, json_object_get(tool, "outputSchema"),
                       "outputSchema", 0);

    ann = json_object_get(tool, "annotations");

    if (ann != NULL) {
        if (!json_is_object(ann)) {
            embed_fail(path, "\"annotations\" must be an object");
        }

        json_object_foreach(ann, key, v) {
            if (!json_is_boolean(v)) {
                embed_fail(path, "annotation \"%s\" must be true or false",
                           key);
            }
        }
    }

    exec = json_object_get(tool, "execution");

    if (exec != NULL) {
        task = json_string_value(json_object_get(exec, "taskSupport"));

        if (!json_is_object(exec) || json_object_size(exec) != 1
            || task == NULL
            || (strcmp(task, "forbidden") != 0
                && strcmp(task, "optional") != 0
                && strcmp(task, "required") != 0))
        {
            embed_fail(path, "\"execution\" must be {\"taskSupport\": "
                       "\"forbidden\"|\"optional\"|\"required\"}");
        }
    }

    json_object_foreach(tool, key, v) {
        if (strcmp(key, "name") != 0 && strcmp(key, "title") != 0
            && strcmp(key, "execution") != 0
            && strcmp(key, "description") != 0
            && strcmp(key, "inputSchema") != 0
            && strcmp(key, "outputSchema") != 0
            && strcmp(key, "annotations") != 0)
        {
            embed_fail(path, "unknown member \"%s\"", key);
        }
    }

    text = json_dumps(tool, JSON_COMPACT);
    if (text == NULL) {
        embed_fail(path, "out of memory");
    }

    json_decref(tool);

    return text;
}


/* HTML: a page whose placeholders are {{name}} (UI: none), with no inline
 * script or style; CSS: nothing like markup */
static void
embed_check_page(const char *path, const char *text, embed_kind_e kind)
{
    const char  *p, *q;

    if (kind == EMBED_CSS) {
        if (strchr(text, '<') != NULL) {
            embed_fail(path, "a style sheet may not hold \"<\"");
        }

        return;
    }

    if (strncasecmp(text, "<!doctype html>", 15) != 0) {
        embed_fail(path, "a page starts with <!doctype html>");
    }

    for (p = strchr(text, '<'); p; p = strchr(p + 1, '<')) {
        if (strncasecmp(p, "<style", 6) == 0) {
            embed_fail(path, "no <style> element: the pages' CSP refuses "
                       "inline style (at byte %ld)", (long) (p - text));
        }

        if (strncasecmp(p, "<script", 7) != 0) {
            continue;
        }

        q = strchr(p, '>');

        if (q == NULL || strncasecmp(q + 1, "</script>", 9) != 0
            || strstr(p, " src=") == NULL || strstr(p, " src=") > q)
        {
            embed_fail(path, "a script is <script src=...></script>: the "
                       "pages' CSP refuses inline script (at byte %ld)",
                       (long) (p - text));
        }
    }

    if (kind == EMBED_UI && strstr(text, "{{") != NULL) {
        embed_fail(path, "a dashboard page has no placeholder (nothing "
                   "fills it): \"{{\" at byte %ld",
                   (long) (strstr(text, "{{") - text));
    }

    for (p = strstr(text, "{{"); p; p = strstr(q + 2, "{{")) {
        for (q = p + 2; *q == '_' || (*q >= 'a' && *q <= 'z'); q++) {
            /* void */
        }

        if (q == p + 2 || q - p - 2 > 32 || strncmp(q, "}}", 2) != 0) {
            embed_fail(path, "a placeholder is {{name}}, name 1-32 of "
                       "a-z and _ (at byte %ld)", (long) (p - text));
        }
    }
}


/* the length of name if p is "{{" sigil name "}}" (name: 1-32 of a-z and
 * _), else 0 */
static size_t
embed_tag(const char *p, char sigil)
{
    size_t  n;

    if (strncmp(p, "{{", 2) != 0 || p[2] != sigil) {
        return 0;
    }

    for (n = 0; p[3 + n] == '_' || (p[3 + n] >= 'a' && p[3 + n] <= 'z'); n++)
    {
        /* void */
    }

    if (n == 0 || n > 32 || strncmp(p + 3 + n, "}}", 2) != 0) {
        return 0;
    }

    return n;
}


/* a page's blocks {{$name}}...{{/name}} from text + from on (a newline
 * right after the opening tag is not the block's), and nothing else but
 * white space */
static size_t
embed_blocks(const char *path, const char *text, size_t from,
    embed_block_t *b)
{
    size_t       n, k, i;
    const char  *p, *end;

    n = 0;

    for (p = text + from; /* void */; p = end + b[n++].name_len + 5) {
        p += strspn(p, " \t\n");

        if (*p == '\0') {
            return n;
        }

        k = embed_tag(p, '$');

        if (k == 0) {
            embed_fail(path, "after its {{<layout}} line a page holds "
                       "blocks {{$name}}...{{/name}} only (at byte %ld)",
                       (long) (p - text));
        }

        if (n == EMBED_MAX_BLOCKS) {
            embed_fail(path, "more than %d blocks", EMBED_MAX_BLOCKS);
        }

        for (i = 0; i < n; i++) {
            if (b[i].name_len == k && strncmp(b[i].name, p + 3, k) == 0) {
                embed_fail(path, "the block {{$%.*s}} is given twice",
                           (int) k, p + 3);
            }
        }

        b[n].name = p + 3;
        b[n].name_len = k;
        b[n].used = 0;

        p += k + 5;
        p += (*p == '\n');

        for (end = strstr(p, "{{"); end; end = strstr(end + 2, "{{")) {
            if (end[2] != '\0' && strchr("$</", end[2]) != NULL) {
                break;
            }
        }

        if (end == NULL || embed_tag(end, '/') != k
            || strncmp(end + 3, b[n].name, k) != 0)
        {
            embed_fail(path, "the block {{$%.*s}} is not closed by "
                       "{{/%.*s}} (blocks do not nest)", (int) k, b[n].name,
                       (int) k, b[n].name);
        }

        b[n].text = p;
        b[n].len = end - p;
    }
}


/* a page built on DIR/layouts/NAME.html (its first line is "{{<NAME}}"):
 * the layout with each slot {{$name}} replaced by the page's block; a slot
 * alone on its line takes the block's lines (none: the line goes) */
static char *
embed_layout(const char *path, const char *dir, const char *text,
    size_t *len)
{
    int            line;
    char           file[4096], *layout, *out;
    size_t         n, k, i, llen;
    const char    *p, *s;
    embed_block_t  b[EMBED_MAX_BLOCKS];

    k = embed_tag(text, '<');

    if (k == 0 || text[k + 5] != '\n') {
        embed_fail(path, "a page built on a layout starts with a line "
                   "{{<name}} (the layout %s/layouts/name.html)", dir);
    }

    snprintf(file, sizeof(file), "%s/layouts/%.*s.html", dir, (int) k,
             text + 3);

    if (access(file, R_OK) != 0) {
        embed_fail(path, "its layout %s: %s", file, strerror(errno));
    }

    n = embed_blocks(path, text, k + 6, b);
    layout = embed_read(file, &llen);

    out = malloc(EMBED_MAX_SIZE + 1);
    if (out == NULL) {
        embed_fail(path, "out of memory");
    }

    *len = 0;
    line = 0;

    for (p = layout; (s = strstr(p, "{{$")) != NULL; p = s + k + 5 + line) {
        embed_append(path, out, len, p, s - p);

        k = embed_tag(s, '$');

        if (k == 0) {
            embed_fail(file, "a slot is {{$name}}, name 1-32 of a-z and _ "
                       "(at byte %ld)", (long) (s - layout));
        }

        for (i = 0; i < n; i++) {
            if (b[i].name_len == k && strncmp(b[i].name, s + 3, k) == 0) {
                break;
            }
        }

        if (i == n) {
            embed_fail(path, "fills no slot {{$%.*s}} of its layout %s (an "
                       "empty block is {{$%.*s}}{{/%.*s}})", (int) k, s + 3,
                       file, (int) k, s + 3, (int) k, s + 3);
        }

        line = (s == layout || s[-1] == '\n') && s[k + 5] == '\n';

        if (!line && memchr(b[i].text, '\n', b[i].len) != NULL) {
            embed_fail(path, "the block {{$%.*s}} fills a slot within a "
                       "line of %s: one line, on the line of its tags",
                       (int) k, s + 3, file);
        }

        embed_append(path, out, len, b[i].text, b[i].len);

        if (line && b[i].len && b[i].text[b[i].len - 1] != '\n') {
            embed_append(path, out, len, "\n", 1);
        }

        b[i].used = 1;
    }

    embed_append(path, out, len, p, strlen(p));
    out[*len] = '\0';

    for (i = 0; i < n; i++) {
        if (!b[i].used) {
            embed_fail(path, "its layout %s has no slot {{$%.*s}}", file,
                       (int) b[i].name_len, b[i].name);
        }
    }

    free(layout);

    return out;
}


/* a page as it is served: its file, or laid out (see embed_layout) */
static char *
embed_read_page(const char *path, const char *dir, size_t *len)
{
    char  *text, *page;

    text = embed_read(path, len);

    if (strncmp(text, "{{<", 3) != 0) {
        return text;
    }

    page = embed_layout(path, dir, text, len);
    free(text);

    return page;
}


/* UI: the Content-Type of a file name, or NULL (an unknown extension) */
static const char *
embed_ui_type(const char *path, const char *name)
{
    size_t       i, len, elen;
    const char  *p;

    len = strlen(name);

    if (len == 0 || len > EMBED_MAX_NAME
        || !(islower((unsigned char) name[0])
             || isdigit((unsigned char) name[0])))
    {
        embed_fail(path, "a dashboard file's name is 1-%d characters of "
                   "a-z 0-9 _ . - starting with a letter or digit",
                   EMBED_MAX_NAME);
    }

    for (p = name; *p; p++) {
        if (!(islower((unsigned char) *p) || isdigit((unsigned char) *p)
              || *p == '_' || *p == '.' || *p == '-'))
        {
            embed_fail(path, "a dashboard file's name may hold a-z, 0-9, "
                       "_ . - only");
        }
    }

    for (i = 0; i < sizeof(embed_ui_types) / sizeof(embed_ui_types[0]); i++)
    {
        elen = strlen(embed_ui_types[i][0]);

        if (len > elen && strcmp(name + len - elen, embed_ui_types[i][0]) == 0)
        {
            return embed_ui_types[i][1];
        }
    }

    embed_fail(path, "unknown extension (known: .html .css .js .json .svg "
               ".png .ico .webp .txt .woff2)");

    return NULL;
}


/* UI: the files of dir (sub: its directory "static", or "" for the top),
 * sorted, as "sub/name"; directories other than static refused */
static size_t
embed_ui_list(const char *dir, const char *sub, char **names, size_t n)
{
    DIR            *d;
    char            path[4096], *name;
    size_t          first;
    struct stat     st;
    struct dirent  *de;

    snprintf(path, sizeof(path), "%s%s%s", dir, *sub ? "/" : "", sub);

    d = opendir(path);
    if (d == NULL) {
        embed_fail(path, "%s", strerror(errno));
    }

    first = n;

    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
            continue;
        }

        snprintf(path, sizeof(path), "%s/%s%s%s", dir, sub, *sub ? "/" : "",
                 de->d_name);

        if (stat(path, &st) != 0) {
            embed_fail(path, "%s", strerror(errno));
        }

        if (S_ISDIR(st.st_mode) && *sub == '\0'
            && (strcmp(de->d_name, "static") == 0
                || strcmp(de->d_name, "layouts") == 0))
        {
            continue;
        }

        if (!S_ISREG(st.st_mode)) {
            embed_fail(path, "not a regular file (the dashboard's files are "
                       "DIR/NAME and DIR/static/NAME, and the pages' "
                       "layouts DIR/layouts/NAME.html)");
        }

        (void) embed_ui_type(path, de->d_name);

        if (n == EMBED_MAX_FILES) {
            embed_fail(dir, "more than %d files", EMBED_MAX_FILES);
        }

        name = malloc(strlen(sub) + strlen(de->d_name) + 2);
        if (name == NULL) {
            embed_fail(dir, "out of memory");
        }

        sprintf(name, "%s%s%s", sub, *sub ? "/" : "", de->d_name);
        names[n++] = name;
    }

    closedir(d);

    qsort(names + first, n - first, sizeof(char *), embed_cmp);

    return n;
}


/* UI: a file's bytes as served: a page (DIR/NAME.html) laid out and
 * checked, any other file as it is */
static char *
embed_ui_read(const char *dir, const char *name, size_t *len)
{
    char    path[4096], *text;
    size_t  n;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    n = strlen(name);

    if (strchr(name, '/') != NULL || n < 5
        || strcmp(name + n - 5, ".html") != 0)
    {
        return embed_read_bytes(path, len, 0);
    }

    text = embed_read_page(path, dir, len);
    embed_check_page(path, text, EMBED_UI);

    return text;
}


/* UI: the table smcp_ui_files[] of every file, and SMCP_UI_NFILES */
static void
embed_ui(FILE *out, const char *dir)
{
    char           *names[EMBED_MAX_FILES], *text, path[4096];
    size_t          i, n, k, len;
    uint64_t        h[EMBED_MAX_FILES];
    const char     *base;

    n = embed_ui_list(dir, "", names, 0);
    n = embed_ui_list(dir, "static", names, n);

    if (n == 0) {
        embed_fail(dir, "no file");
    }

    fputs("typedef struct {\n"
          "    const char  *path;           /* \"run.html\", "
          "\"static/app.css\" */\n"
          "    const char  *type;           /* Content-Type */\n"
          "    const char  *etag;           /* quoted */\n"
          "    const char  *data;\n"
          "    size_t       len;\n"
          "} smcp_ui_file_t;\n\n", out);

    for (i = 0; i < n; i++) {
        text = embed_ui_read(dir, names[i], &len);

        h[i] = 1469598103934665603ULL;

        for (k = 0; k < len; k++) {
            h[i] = (h[i] ^ (unsigned char) text[k]) * 1099511628211ULL;
        }

        fprintf(out, "/* %s */\nstatic const char smcp_ui_data_%zu[] =\n",
                names[i], i);
        embed_string(out, text, len, EMBED_LINE);
        fputs(";\n\n", out);

        free(text);
    }

    fputs("static const smcp_ui_file_t  smcp_ui_files[] = {\n", out);

    for (i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);

        base = strrchr(names[i], '/');
        base = base ? base + 1 : names[i];

        fprintf(out, "    { \"%s\", \"%s\", \"\\\"%016llx\\\"\",\n"
                "      smcp_ui_data_%zu, sizeof(smcp_ui_data_%zu) - 1 },\n",
                names[i], embed_ui_type(path, base),
                (unsigned long long) h[i], i, i);

        free(names[i]);
    }

    fprintf(out, "};\n\n#define SMCP_UI_NFILES  %zu\n", n);
}


static int
embed_ui_main(const char *out_path, const char *dir)
{
    FILE  *out;

    out = embed_out_open(out_path);

    fprintf(out, "/* generated by smcp-embed from the files of %s: do not "
            "edit */\n\n", dir);

    embed_ui(out, dir);
    embed_out_close(out, out_path);

    return 0;
}


/* page: DIR/NAME.html as it is served, to stdout */
static int
embed_page_main(const char *path)
{
    char        dir[4096], *text;
    size_t      len;
    const char  *slash;

    slash = strrchr(path, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int) (slash - path) : 1,
             slash ? path : ".");

    text = embed_read_page(path, dir, &len);
    embed_check_page(path, text, EMBED_HTML);

    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
        embed_fail("stdout", "%s", strerror(errno));
    }

    free(text);

    return 0;
}


/* perl: each file, checked, as smcp_perl_NAME */
static int
embed_perl_main(const char *out_path, int n, char **files)
{
    int          i;
    FILE        *out;
    char        *text, *p, name[EMBED_MAX_NAME + 1];
    size_t       len, nl;
    const char  *base, *perl;

    out = embed_out_open(out_path);

    fprintf(out, "/* generated by smcp-embed from Perl programs: do not "
            "edit */\n\n");

    for (i = 0; i < n; i++) {
        base = strrchr(files[i], '/');
        base = base ? base + 1 : files[i];

        if (strlen(base) > EMBED_MAX_NAME) {
            embed_fail(files[i], "the name is longer than %d characters",
                       EMBED_MAX_NAME);
        }

        strcpy(name, base);

        for (p = name; *p; p++) {
            if (*p == '-') {
                *p = '_';
            }
        }

        embed_check_name(files[i], name);

        text = embed_read(files[i], &len);
        nl = strcspn(text, "\n");
        perl = strstr(text, "perl");

        if (strncmp(text, "#!", 2) != 0 || perl == NULL
            || (size_t) (perl - text) + 4 > nl)
        {
            embed_fail(files[i], "the first line is no #! line naming perl");
        }

        if (strstr(text, "\nuse strict;\n") == NULL) {
            embed_fail(files[i], "no \"use strict;\" line");
        }

        fprintf(out, "/* %s */\nstatic const char smcp_perl_%s[] =\n",
                base, name);
        embed_string(out, text, len, 0);
        fputs(";\n\n", out);

        free(text);
    }

    embed_out_close(out, out_path);

    return 0;
}


static void
embed_usage(void)
{
    fprintf(stderr, "usage: smcp-embed lua|tools|html|css|ui OUT.h DIR\n"
                    "       smcp-embed page DIR/NAME.html\n"
                    "       smcp-embed perl OUT.h FILE...\n");
    exit(2);
}


int
main(int argc, char **argv)
{
    char          *names[EMBED_MAX_FILES], *text, *lua, path[4096];
    FILE          *out;
    size_t         i, n, len;
    const char    *dir, *prefix, *macro, *suffix;
    embed_kind_e   kind;

    if (argc == 3 && strcmp(argv[1], "page") == 0) {
        return embed_page_main(argv[2]);
    }

    if (argc >= 4 && strcmp(argv[1], "perl") == 0) {
        return embed_perl_main(argv[2], argc - 3, argv + 3);
    }

    if (argc != 4) {
        embed_usage();
    }

    if (strcmp(argv[1], "lua") == 0) {
        kind = EMBED_LUA;
        prefix = "smcp_lua_";
        macro = "SMCP_LUA_SCRIPTS";
        suffix = ".lua";

    } else if (strcmp(argv[1], "tools") == 0) {
        kind = EMBED_TOOLS;
        prefix = "smcp_tool_";
        macro = "SMCP_TOOLS";
        suffix = ".json";

    } else if (strcmp(argv[1], "html") == 0) {
        kind = EMBED_HTML;
        prefix = "smcp_html_";
        macro = "SMCP_HTML";
        suffix = ".html";

    } else if (strcmp(argv[1], "css") == 0) {
        kind = EMBED_CSS;
        prefix = "smcp_css_";
        macro = "SMCP_CSS";
        suffix = ".css";

    } else if (strcmp(argv[1], "ui") == 0) {
        kind = EMBED_UI;
        prefix = "";
        macro = "";
        suffix = "";

    } else {
        embed_usage();
        return 2;
    }

    dir = argv[3];

    if (kind == EMBED_UI) {
        return embed_ui_main(argv[2], dir);
    }

    n = embed_list(dir, suffix, names);

    if (n == 0) {
        embed_fail(dir, "no *%s file", suffix);
    }

    out = embed_out_open(argv[2]);

    fprintf(out, "/* generated by smcp-embed from the %s files of %s: do not "
            "edit */\n\n", suffix, dir);

    for (i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s%s", dir, names[i], suffix);
        embed_check_name(path, names[i]);

        if (kind == EMBED_LUA) {
            text = embed_read(path, &len);
            embed_check_lua(path, text);
            lua = embed_lua_expand(path, dir, text, &len);
            free(text);
            text = lua;

        } else if (kind == EMBED_TOOLS) {
            text = embed_check_tool(path, dir, names[i]);
            len = strlen(text);

        } else if (kind == EMBED_HTML) {
            text = embed_read_page(path, dir, &len);
            embed_check_page(path, text, kind);

        } else {
            text = embed_read(path, &len);
            embed_check_page(path, text, kind);
        }

        fprintf(out, "/* %s%s */\nstatic const char %s%s[] =\n", names[i],
                suffix, prefix, names[i]);
        embed_string(out, text, len, kind == EMBED_TOOLS ? EMBED_LINE : 0);
        fputs(";\n\n", out);

        free(text);
    }

    fprintf(out, "#define %s(X)", macro);

    for (i = 0; i < n; i++) {
        fprintf(out, " \\\n    X(%s)", names[i]);
    }

    fputs("\n", out);
    embed_out_close(out, argv[2]);

    for (i = 0; i < n; i++) {
        free(names[i]);
    }

    return 0;
}
