/*
 * git's pkt-line framing and the command list that opens a
 * git-receive-pack request (gitprotocol-pack(5), "Reference Update
 * Request and Packfile Transfer"): what a push asks to change, checked by
 * the egress proxy before a byte of it reaches the upstream.  Plain C, no
 * nginx: fuzzed and unit-tested on its own (t/pktline.t).
 */

#ifndef SMCP_PKTLINE_H
#define SMCP_PKTLINE_H

#include <stddef.h>

#include "smcp_util.h"

/* the data does not hold the whole of what is asked for */
#define SMCP_PKT_MORE       -2
/* not what the protocol allows */
#define SMCP_PKT_BAD        -3

/* the largest pkt-line git writes or reads (LARGE_PACKET_MAX) */
#define SMCP_PKT_MAX        65520

#define SMCP_PKT_DATA       0
#define SMCP_PKT_FLUSH      1       /* "0000" */
#define SMCP_PKT_DELIM      2       /* "0001" (protocol v2) */
#define SMCP_PKT_END        3       /* "0002" (protocol v2) */


typedef struct {
    int                    type;
    const unsigned char   *data;    /* payload (type SMCP_PKT_DATA) */
    size_t                 len;
} smcp_pkt_t;


/*
 * Reads the pkt-line at buf.  SMCP_OK: *pkt is it and *used its length on
 * the wire; SMCP_PKT_MORE: len ends inside it; SMCP_PKT_BAD: not a
 * pkt-line (bad length digits, a length of 3, or above SMCP_PKT_MAX).
 */
int smcp_pkt_read(const unsigned char *buf, size_t len, smcp_pkt_t *pkt,
    size_t *used);

/*
 * Checks the command list of a receive-pack request: the pkt-lines up to
 * the first flush.  Accepted: "shallow <oid>" lines and commands
 * "<old> <new> <ref>[\0capabilities]" whose ref is exactly `ref` and whose
 * new id is not all zeros (a delete); an empty list (git's probe before a
 * large push) too.  SMCP_OK: accepted, *ncommands the number of
 * commands; SMCP_PKT_MORE: the list does not end within len; SMCP_ERR:
 * refused (any other ref, a delete, a signed push: push-cert);
 * SMCP_PKT_BAD: malformed.  On a refusal err says why in words the pusher
 * can act on (a refused ref name is quoted with anything unprintable
 * replaced by '?').
 */
int smcp_pkt_check_push(const unsigned char *buf, size_t len,
    const char *ref, size_t reflen, unsigned *ncommands, char *err,
    size_t errlen);

#endif /* SMCP_PKTLINE_H */
