/*
 * A fast reader for the plain shapes of JSON text (see smcp_json.h).  It
 * follows jansson's grammar where it accepts, and declines (NULL) at the
 * first byte it does not take: an escape, a control character or a byte
 * of non-ASCII in a string, a real number, a long integer, deep nesting, a
 * key seen twice, or anything that is not JSON.
 */

#include <string.h>

#include "smcp_json.h"


typedef struct {
    const unsigned char  *p;
    const unsigned char  *last;
    int                   depth;
} smcp_json_reader_t;


static json_t *smcp_json_value(smcp_json_reader_t *rd);


/* JSON's whitespace, as jansson skips it */
static void
smcp_json_space(smcp_json_reader_t *rd)
{
    while (rd->p < rd->last
           && (*rd->p == ' ' || *rd->p == '\t' || *rd->p == '\n'
               || *rd->p == '\r'))
    {
        rd->p++;
    }
}


/* a string of printable ASCII (DEL too: jansson takes it) and no escape:
 * its bytes, in the input; -1: declined */
static int
smcp_json_string(smcp_json_reader_t *rd, const char **s, size_t *len)
{
    const unsigned char  *start;

    if (rd->p == rd->last || *rd->p != '"') {
        return -1;
    }

    start = ++rd->p;

    while (rd->p < rd->last && *rd->p >= 0x20 && *rd->p < 0x80
           && *rd->p != '"' && *rd->p != '\\')
    {
        rd->p++;
    }

    if (rd->p == rd->last || *rd->p != '"') {
        return -1;
    }

    *s = (const char *) start;
    *len = rd->p - start;
    rd->p++;

    return 0;
}


/* -?(0|[1-9][0-9]{0,17}) not followed by a fraction or an exponent (a
 * real, and longer integers, are jansson's) */
static json_t *
smcp_json_integer(smcp_json_reader_t *rd)
{
    int        neg, digits;
    long long  n;

    neg = 0;

    if (*rd->p == '-') {
        neg = 1;
        rd->p++;
    }

    if (rd->p == rd->last || *rd->p < '0' || *rd->p > '9') {
        return NULL;
    }

    n = 0;

    if (*rd->p == '0') {
        rd->p++;

        if (rd->p < rd->last && *rd->p >= '0' && *rd->p <= '9') {
            /* a leading zero: invalid */
            return NULL;
        }

    } else {
        for (digits = 0;
             rd->p < rd->last && *rd->p >= '0' && *rd->p <= '9';
             rd->p++)
        {
            if (++digits > 18) {
                return NULL;
            }

            n = n * 10 + (*rd->p - '0');
        }
    }

    if (rd->p < rd->last
        && (*rd->p == '.' || *rd->p == 'e' || *rd->p == 'E'))
    {
        return NULL;
    }

    return json_integer(neg ? -n : n);
}


static json_t *
smcp_json_literal(smcp_json_reader_t *rd, const char *word, size_t len,
    json_t *value)
{
    if ((size_t) (rd->last - rd->p) < len || memcmp(rd->p, word, len) != 0) {
        return NULL;
    }

    /* what follows must end the value: the caller checks it */
    rd->p += len;

    return value;
}


/* after a member or an element: 1 at the closing byte (taken), 0 at a
 * comma (taken, and the space after it), -1: declined */
static int
smcp_json_next(smcp_json_reader_t *rd, unsigned char close)
{
    smcp_json_space(rd);

    if (rd->p == rd->last || (*rd->p != close && *rd->p != ',')) {
        return -1;
    }

    if (*rd->p++ == close) {
        return 1;
    }

    smcp_json_space(rd);

    return 0;
}


/* past an object's or an array's opening byte and the space after it: 1
 * when the closing byte follows at once (empty: consumed too), else 0 */
static int
smcp_json_open(smcp_json_reader_t *rd, unsigned char close)
{
    rd->p++;
    smcp_json_space(rd);

    if (rd->p < rd->last && *rd->p == close) {
        rd->p++;
        return 1;
    }

    return 0;
}


static json_t *
smcp_json_object(smcp_json_reader_t *rd)
{
    size_t       len;
    json_t      *obj, *v;
    const char  *key;

    obj = json_object();
    if (obj == NULL) {
        return NULL;
    }

    if (smcp_json_open(rd, '}')) {
        return obj;
    }

    for ( ;; ) {
        if (smcp_json_string(rd, &key, &len) != 0) {
            goto declined;
        }

        smcp_json_space(rd);

        if (rd->p == rd->last || *rd->p != ':') {
            goto declined;
        }

        rd->p++;
        smcp_json_space(rd);

        v = smcp_json_value(rd);
        if (v == NULL) {
            goto declined;
        }

        /* a key twice: JSON_REJECT_DUPLICATES refuses it */
        if (json_object_getn(obj, key, len) != NULL
            || json_object_setn_new_nocheck(obj, key, len, v) != 0)
        {
            json_decref(v);
            goto declined;
        }

        switch (smcp_json_next(rd, '}')) {
        case 1:
            return obj;
        case -1:
            goto declined;
        }
    }

declined:

    json_decref(obj);
    return NULL;
}


static json_t *
smcp_json_array(smcp_json_reader_t *rd)
{
    json_t  *arr, *v;

    arr = json_array();
    if (arr == NULL) {
        return NULL;
    }

    if (smcp_json_open(rd, ']')) {
        return arr;
    }

    for ( ;; ) {
        v = smcp_json_value(rd);

        if (v == NULL || json_array_append_new(arr, v) != 0) {
            goto declined;
        }

        switch (smcp_json_next(rd, ']')) {
        case 1:
            return arr;
        case -1:
            goto declined;
        }
    }

declined:

    json_decref(arr);
    return NULL;
}


/* a value, then what may follow a value (or the end) */
static json_t *
smcp_json_value(smcp_json_reader_t *rd)
{
    size_t       len;
    json_t      *v;
    const char  *s;

    if (rd->p == rd->last) {
        return NULL;
    }

    switch (*rd->p) {

    case '{':
    case '[':
        if (++rd->depth > SMCP_JSON_PLAIN_DEPTH) {
            return NULL;
        }

        v = (*rd->p == '{') ? smcp_json_object(rd) : smcp_json_array(rd);
        rd->depth--;
        break;

    case '"':
        v = (smcp_json_string(rd, &s, &len) == 0)
            ? json_stringn_nocheck(s, len) : NULL;
        break;

    case 't':
        v = smcp_json_literal(rd, "true", 4, json_true());
        break;

    case 'f':
        v = smcp_json_literal(rd, "false", 5, json_false());
        break;

    case 'n':
        v = smcp_json_literal(rd, "null", 4, json_null());
        break;

    default:
        if (*rd->p == '-' || (*rd->p >= '0' && *rd->p <= '9')) {
            v = smcp_json_integer(rd);
            break;
        }

        return NULL;
    }

    if (v == NULL) {
        return NULL;
    }

    if (rd->p < rd->last && *rd->p != ',' && *rd->p != '}' && *rd->p != ']'
        && *rd->p != ' ' && *rd->p != '\t' && *rd->p != '\n'
        && *rd->p != '\r')
    {
        /* "truex", "1x", "\"a\"b": not a value's end */
        json_decref(v);
        return NULL;
    }

    return v;
}


json_t *
smcp_json_load_plain(const char *buf, size_t len)
{
    json_t              *v;
    smcp_json_reader_t   rd;

    rd.p = (const unsigned char *) buf;
    rd.last = rd.p + len;
    rd.depth = 0;

    smcp_json_space(&rd);

    /* an object or an array only: other values are rare here */
    if (rd.p == rd.last || (*rd.p != '{' && *rd.p != '[')) {
        return NULL;
    }

    v = smcp_json_value(&rd);
    if (v == NULL) {
        return NULL;
    }

    smcp_json_space(&rd);

    if (rd.p != rd.last) {
        json_decref(v);
        return NULL;
    }

    return v;
}
