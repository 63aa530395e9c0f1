/*
 * The command list of a git push (common/smcp_pktline.c): the start of
 * every git-receive-pack body a sandbox sends through the egress proxy,
 * checked in nginx before a byte of it goes upstream.
 *
 * The input is the body.  Checked: pkt-lines read back within the input
 * and their lengths add up; an accepted push names only the run's branch
 * (refs/heads/opencode/run_<24 hex>), never a zero new id (a delete),
 * never push-cert; a refusal says why in printable text; a prefix of an
 * accepted list is never accepted with more commands than the whole.
 */

#include <string.h>

#include "smcp_pktline.h"
#include "fuzz.h"


#define FUZZ_REF  "refs/heads/opencode/run_0123456789abcdef01234567"


/* every command of an accepted list, walked again independently */
static void
fuzz_accepted(const unsigned char *buf, size_t len, unsigned n)
{
    size_t       off, used;
    unsigned     commands;
    smcp_pkt_t   pkt;
    const char  *p, *sp;

    commands = 0;

    for (off = 0; off < len; off += used) {
        fuzz_check(smcp_pkt_read(buf + off, len - off, &pkt, &used) == SMCP_OK,
                   "an accepted list reads back");
        fuzz_check(used >= 4 && used <= len - off, "a pkt-line lies inside");

        if (pkt.type == SMCP_PKT_FLUSH) {
            break;
        }

        fuzz_check(pkt.type == SMCP_PKT_DATA, "only data before the flush");

        p = (const char *) pkt.data;

        if (pkt.len >= 8 && memcmp(p, "shallow ", 8) == 0) {
            continue;
        }

        /* "<old> <new> <ref>[\0caps][\n]" */
        sp = memchr(p, ' ', pkt.len);
        fuzz_check(sp != NULL, "a command has an old id");
        sp = memchr(sp + 1, ' ', pkt.len - (sp + 1 - p));
        fuzz_check(sp != NULL, "a command has a new id");
        fuzz_check(pkt.len - (sp + 1 - p) >= sizeof(FUZZ_REF) - 1
                   && memcmp(sp + 1, FUZZ_REF, sizeof(FUZZ_REF) - 1) == 0,
                   "an accepted command names the run's branch");
        fuzz_check(strspn(sp - 40, "0") < 40,
                   "an accepted command is not a delete");
        commands++;
    }

    fuzz_check(commands == n, "the commands counted are the commands");
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int        rc, rc2;
    size_t     i;
    unsigned   n, n2;
    char       err[256];

    n = 0;
    err[0] = '\0';

    rc = smcp_pkt_check_push(data, size, FUZZ_REF, sizeof(FUZZ_REF) - 1, &n,
                             err, sizeof(err));

    fuzz_check(rc == SMCP_OK || rc == SMCP_ERR || rc == SMCP_PKT_MORE
               || rc == SMCP_PKT_BAD, "one of the documented results");

    if (rc == SMCP_OK) {
        fuzz_accepted(data, size, n);

    } else if (rc == SMCP_ERR) {
        fuzz_check(strnlen(err, sizeof(err)) < sizeof(err) && err[0] != '\0',
                   "a refusal says why");

        for (i = 0; err[i]; i++) {
            fuzz_check((unsigned char) err[i] >= 0x20
                       && (unsigned char) err[i] < 0x7f,
                       "the reason is printable");
        }
    }

    /* a shorter body never has more accepted commands */
    if (size > 0) {
        n2 = 0;
        rc2 = smcp_pkt_check_push(data, size / 2, FUZZ_REF,
                                  sizeof(FUZZ_REF) - 1, &n2, err, sizeof(err));
        fuzz_check(rc2 != SMCP_OK || rc != SMCP_OK || n2 <= n,
                   "a prefix accepts no more than the whole");
    }

    return 0;
}
