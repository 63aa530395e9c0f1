/*
 * pkt-lines and the command list of a git-receive-pack request.
 */

#include <string.h>
#include <stdio.h>

#include "smcp_pktline.h"


int
smcp_pkt_read(const unsigned char *buf, size_t len, smcp_pkt_t *pkt,
    size_t *used)
{
    int     i, d;
    size_t  n;

    if (len < 4) {
        return SMCP_PKT_MORE;
    }

    n = 0;

    for (i = 0; i < 4; i++) {
        d = smcp_hex_value(buf[i]);
        if (d < 0) {
            return SMCP_PKT_BAD;
        }

        n = n * 16 + d;
    }

    if (n < 4) {
        pkt->type = (n == 0) ? SMCP_PKT_FLUSH
                    : (n == 1) ? SMCP_PKT_DELIM
                    : (n == 2) ? SMCP_PKT_END : -1;

        if (pkt->type < 0) {
            return SMCP_PKT_BAD;
        }

        pkt->data = NULL;
        pkt->len = 0;
        *used = 4;

        return SMCP_OK;
    }

    if (n > SMCP_PKT_MAX) {
        return SMCP_PKT_BAD;
    }

    if (len < n) {
        return SMCP_PKT_MORE;
    }

    pkt->type = SMCP_PKT_DATA;
    pkt->data = buf + 4;
    pkt->len = n - 4;
    *used = n;

    return SMCP_OK;
}


/* 40 (SHA-1) or 64 (SHA-256) lowercase hex digits */
static size_t
smcp_pkt_oid(const unsigned char *p, size_t len)
{
    size_t  n;

    for (n = 0; n < len && n < 64; n++) {
        if (!((p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'f'))) {
            break;
        }
    }

    return (n == 40 || n == 64) ? n : 0;
}


/* a ref name from the wire, quotable in an error message */
static void
smcp_pkt_quote(char *dst, size_t size, const unsigned char *p, size_t len)
{
    size_t  i, n;

    if (size == 0) {
        return;
    }

    n = (len < size - 1) ? len : size - 1;

    if (n > 100) {
        n = 100;
    }

    for (i = 0; i < n; i++) {
        dst[i] = (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\')
                 ? (char) p[i] : '?';
    }

    dst[n] = '\0';
}


/* one command: "<old> <new> <ref>" (the capabilities already cut off) */
static int
smcp_pkt_command(const unsigned char *p, size_t len, const char *ref,
    size_t reflen, char *err, size_t errlen)
{
    size_t                n, i;
    const unsigned char  *name;
    char                  quoted[128];

    n = smcp_pkt_oid(p, len);

    if (n == 0 || len < 2 * n + 3 || p[n] != ' '
        || smcp_pkt_oid(p + n + 1, len - n - 1) != n || p[2 * n + 1] != ' ')
    {
        snprintf(err, errlen, "malformed push: a command is not "
                 "\"<old-id> <new-id> <ref>\"");
        return SMCP_PKT_BAD;
    }

    name = p + 2 * n + 2;
    len -= 2 * n + 2;

    if (len != reflen || memcmp(name, ref, reflen) != 0) {
        smcp_pkt_quote(quoted, sizeof(quoted), name, len);
        snprintf(err, errlen, "a run may push only its own branch %.*s "
                 "(refused: \"%s\")", (int) reflen, ref, quoted);
        return SMCP_ERR;
    }

    for (i = n + 1; i < 2 * n + 1; i++) {
        if (p[i] != '0') {
            return SMCP_OK;
        }
    }

    snprintf(err, errlen, "deleting %.*s is refused", (int) reflen, ref);

    return SMCP_ERR;
}


int
smcp_pkt_check_push(const unsigned char *buf, size_t len, const char *ref,
    size_t reflen, unsigned *ncommands, char *err, size_t errlen)
{
    int                   rc;
    size_t                used, n;
    smcp_pkt_t            pkt;
    const unsigned char  *p, *nul;

    *ncommands = 0;
    p = buf;

    for ( ;; ) {
        rc = smcp_pkt_read(p, buf + len - p, &pkt, &used);

        if (rc == SMCP_PKT_MORE) {
            return SMCP_PKT_MORE;
        }

        if (rc != SMCP_OK) {
            snprintf(err, errlen, "malformed push: not a pkt-line");
            return SMCP_PKT_BAD;
        }

        p += used;

        if (pkt.type == SMCP_PKT_FLUSH) {
            return SMCP_OK;
        }

        if (pkt.type != SMCP_PKT_DATA || pkt.len == 0) {
            snprintf(err, errlen, "malformed push: unexpected packet in the "
                     "command list");
            return SMCP_PKT_BAD;
        }

        n = pkt.len;

        if (pkt.data[n - 1] == '\n') {
            n--;
        }

        if (n >= 9 && memcmp(pkt.data, "push-cert", 9) == 0) {
            snprintf(err, errlen, "signed pushes (push-cert) are refused");
            return SMCP_ERR;
        }

        if (n > 8 && memcmp(pkt.data, "shallow ", 8) == 0) {
            if (smcp_pkt_oid(pkt.data + 8, n - 8) != n - 8) {
                snprintf(err, errlen, "malformed push: a shallow line "
                         "without an object id");
                return SMCP_PKT_BAD;
            }

            continue;
        }

        /* capabilities follow a NUL (git reads them on any line) */
        nul = memchr(pkt.data, '\0', n);
        if (nul) {
            n = nul - pkt.data;
        }

        rc = smcp_pkt_command(pkt.data, n, ref, reflen, err, errlen);
        if (rc != SMCP_OK) {
            return rc;
        }

        (*ncommands)++;
    }
}
