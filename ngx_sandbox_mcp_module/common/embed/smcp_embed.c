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
 *                                ETag, bytes, length)
 *
 *   smcp-embed html OUT.h DIR    every DIR/NAME.html (a page with
 *                                {{name}} placeholders) becomes
 *                                static const char smcp_html_NAME[]
 *   smcp-embed css OUT.h DIR     every DIR/NAME.css becomes
 *                                static const char smcp_css_NAME[]
 *
 * lua, tools, html and css also define an X-macro listing the names
 * (SMCP_LUA_SCRIPTS(X), SMCP_TOOLS(X), SMCP_HTML(X), SMCP_CSS(X)).
 * Entries come in the order of their file names.
 *
 * UI: a name is [a-z0-9_.-], starts with a letter or digit, and ends in a
 * known extension (its content type); anything else in the directories,
 * or a file that cannot be read, stops the build.  Bytes are embedded as
 * they are (binary files too); the ETag is the FNV-1a hash of them.
 *
 * Lua: NAME is [a-z0-9_]; the opening comment block holds a line starting
 * "-- KEYS" and one starting "-- ARGV" (what the script is handed).  The
 * text is embedded as it is (Redis reports errors with the file's line
 * numbers).
 *
 * Tools: one JSON object (no duplicate keys) with name (= NAME), title,
 * description, inputSchema (type "object", properties, additionalProperties
 * false, required naming properties), outputSchema (type "object") and
 * optionally annotations (booleans) and execution (taskSupport one of
 * "forbidden", "optional", "required").  An object {"$include": "FILE"}
 * anywhere in it is replaced by the JSON of DIR/include/FILE.  Embedded
 * compact.
 *
 * HTML: starts with "<!doctype html>" (any case); every "{{" opens a
 * placeholder of 1-32 characters of [a-z_] closed by "}}" (the server
 * fills them in, escaped).  CSS: no "<" (it is served as a file, but
 * never lets a page's markup be closed by a style).
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

#include <jansson.h>


#define EMBED_MAX_FILES     256
#define EMBED_MAX_NAME      64
#define EMBED_MAX_SIZE      (1024 * 1024)
#define EMBED_MAX_INCLUDES  8       /* nesting of $include */
#define EMBED_LINE          72      /* characters per C string line of
                                       JSON (Lua: one per line of text) */


typedef enum {
    EMBED_LUA,
    EMBED_TOOLS,
    EMBED_UI,
    EMBED_HTML,
    EMBED_CSS
} embed_kind_e;


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


static const char  *embed_out_tmp;


static void
embed_fail(const char *file, const char *fmt, ...)
{
    va_list  ap;

    fprintf(stderr, "smcp-embed: %s: ", file);

    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);

    fputc('\n', stderr);

    if (embed_out_tmp) {
        remove(embed_out_tmp);
    }

    exit(1);
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


/* HTML: a page whose placeholders are {{name}}; CSS: nothing like markup */
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
            && strcmp(de->d_name, "static") == 0)
        {
            continue;
        }

        if (!S_ISREG(st.st_mode)) {
            embed_fail(path, "not a regular file (the dashboard's files are "
                       "DIR/NAME and DIR/static/NAME)");
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


/* UI: the table smcp_ui_files[] of every file, and SMCP_UI_NFILES */
static void
embed_ui(FILE *out, const char *dir)
{
    char           *names[EMBED_MAX_FILES], *text, path[4096];
    size_t          i, n, k, len;
    uint64_t        h;
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
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        text = embed_read_bytes(path, &len, 0);

        fprintf(out, "/* %s */\nstatic const char smcp_ui_data_%zu[] =\n",
                names[i], i);
        embed_string(out, text, len, EMBED_LINE);
        fputs(";\n\n", out);

        free(text);
    }

    fputs("static const smcp_ui_file_t  smcp_ui_files[] = {\n", out);

    for (i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        text = embed_read_bytes(path, &len, 0);

        h = 1469598103934665603ULL;

        for (k = 0; k < len; k++) {
            h = (h ^ (unsigned char) text[k]) * 1099511628211ULL;
        }

        base = strrchr(names[i], '/');
        base = base ? base + 1 : names[i];

        fprintf(out, "    { \"%s\", \"%s\", \"\\\"%016llx\\\"\",\n"
                "      smcp_ui_data_%zu, sizeof(smcp_ui_data_%zu) - 1 },\n",
                names[i], embed_ui_type(path, base), (unsigned long long) h,
                i, i);

        free(text);
        free(names[i]);
    }

    fprintf(out, "};\n\n#define SMCP_UI_NFILES  %zu\n", n);
}


static int
embed_ui_main(const char *out_path, const char *dir)
{
    FILE  *out;
    char   tmp[4096];

    snprintf(tmp, sizeof(tmp), "%s.tmp", out_path);
    embed_out_tmp = tmp;

    out = fopen(tmp, "w");
    if (out == NULL) {
        embed_fail(tmp, "%s", strerror(errno));
    }

    fprintf(out, "/* generated by smcp-embed from the files of %s: do not "
            "edit */\n\n", dir);

    embed_ui(out, dir);

    if (fclose(out) != 0) {
        embed_fail(tmp, "%s", strerror(errno));
    }

    if (rename(tmp, out_path) != 0) {
        embed_fail(out_path, "%s", strerror(errno));
    }

    return 0;
}


static void
embed_usage(void)
{
    fprintf(stderr, "usage: smcp-embed lua|tools|html|css|ui OUT.h DIR\n");
    exit(2);
}


int
main(int argc, char **argv)
{
    char          *names[EMBED_MAX_FILES], *text, path[4096], tmp[4096];
    FILE          *out;
    size_t         i, n, len;
    const char    *dir, *prefix, *macro, *suffix;
    embed_kind_e   kind;

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

    snprintf(tmp, sizeof(tmp), "%s.tmp", argv[2]);
    embed_out_tmp = tmp;

    out = fopen(tmp, "w");
    if (out == NULL) {
        embed_fail(tmp, "%s", strerror(errno));
    }

    fprintf(out, "/* generated by smcp-embed from the %s files of %s: do not "
            "edit */\n\n", suffix, dir);

    for (i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s%s", dir, names[i], suffix);
        embed_check_name(path, names[i]);

        if (kind == EMBED_LUA) {
            text = embed_read(path, &len);
            embed_check_lua(path, text);

        } else if (kind == EMBED_TOOLS) {
            text = embed_check_tool(path, dir, names[i]);
            len = strlen(text);

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

    if (fclose(out) != 0) {
        embed_fail(tmp, "%s", strerror(errno));
    }

    if (rename(tmp, argv[2]) != 0) {
        embed_fail(argv[2], "%s", strerror(errno));
    }

    for (i = 0; i < n; i++) {
        free(names[i]);
    }

    return 0;
}
