package SMCP::Receiver;

# A fake receiver of completion notifications (webhooks), core Perl only:
# an SMCP::Fakes server (forked, one child per connection, every request
# one JSON line in its log before it is answered) that answers by the
# path it is sent to:
#
#   /flaky/...   500 ("try later") to the first `fails` requests on that
#                exact path (default 3), then 204
#   /hang/...    reads the request, logs it (status 0), never answers: it
#                holds the connection until the peer closes it (or 120 s),
#                and notes when (->closed_at($path): [epoch, ...])
#   /redirect/.. 302 to /landed on this receiver (a sender must not follow)
#   /status/N/.. answers N (a JSON body {"error":"scripted"})
#   anything else: 204
#
# Every request's log line has, besides SMCP::Fakes' fields (time,
# headers, header_list, body, json, status, ...): raw_b64 (the body's exact
# bytes, base64) and sig (the receiver's own check of X-SMCP-Signature with
# the secret it was given: 'ok', 'bad', or 'none' when the request has no
# signature headers).
#
#   use SMCP::Receiver;
#   my $rcv = SMCP::Receiver->start(secret => $secret, fails => 3);
#   $rcv->url;                      # http://127.0.0.1:PORT
#   $rcv->requests(path => '/flaky/a');  # SMCP::Fakes' requests(), + raw()
#   SMCP::Receiver::raw($req);      # the body's bytes
#   SMCP::Receiver::verify($secret, $timestamp, $body, $header) -> 1|0
#       the receiver side of the signature: X-SMCP-Signature is
#       "sha256=" . hex HMAC-SHA256(secret, timestamp . "." . body)

use strict;
use warnings;

use Digest::SHA qw(hmac_sha256_hex);
use Fcntl qw(:flock);
use IO::Select;
use MIME::Base64 qw(encode_base64 decode_base64);
use Time::HiRes qw(time);

use SMCP::Fakes;

our @ISA = ('SMCP::Fakes::Server');

sub start { my ($class, %o) = @_; return $class->_start(kind => 'receiver', %o) }

sub _defaults { return (fails => 3, secret => undef) }

# verify($secret, $timestamp, $body_bytes, $signature_header) -> 1 | 0
sub verify {
    my ($secret, $ts, $body, $hdr) = @_;
    return 0 unless defined $secret && defined $ts && defined $hdr && defined $body;
    my ($hex) = $hdr =~ /^sha256=([0-9a-f]{64})$/ or return 0;
    my $want = hmac_sha256_hex("$ts.$body", $secret);
    # constant time, as a receiver should
    my $d = 0;
    $d |= ord(substr($hex, $_, 1)) ^ ord(substr($want, $_, 1)) for 0 .. 63;
    return $d == 0 ? 1 : 0;
}

# the exact bytes of a logged request's body
sub raw { my ($req) = @_; return decode_base64($req->{raw_b64} // '') }

sub closed_at {
    my ($self, $path) = @_;
    my $c = $self->_state_read('closed.json') || {};
    return @{ $c->{$path} || [] };
}

sub _handle {
    my ($self, $req, $c) = @_;
    my $h = $req->{headers};
    my $sig = !defined $h->{'x-smcp-signature'} && !defined $h->{'x-smcp-timestamp'} ? 'none'
            : verify($self->{secret}, $h->{'x-smcp-timestamp'}, $req->{body},
                     $h->{'x-smcp-signature'}) ? 'ok' : 'bad';
    $req->{log_extra} = { raw_b64 => encode_base64($req->{body} // '', ''), sig => $sig };
    my $path = $req->{path};

    if ($path =~ m{^/hang(/|$)}) {
        $self->_log($req, status => 0);
        my $sel = IO::Select->new($c);
        my $end = time() + 120;
        while (time() < $end) {
            next unless $sel->can_read(0.2);
            my $n = sysread($c, my $buf, 65536);
            last if !defined $n || $n == 0;
        }
        my $t = time();
        $self->_state_update('closed.json', sub {
            my ($d) = @_;
            push @{ $d->{$path} }, $t;
            return ($d || {});
        });
        return 0;
    }
    if ($path =~ m{^/flaky(/|$)}) {
        my $n = $self->_state_update('flaky.json', sub {
            my ($d) = @_;
            $d ||= {};
            my $k = ++$d->{$path};
            return ($d, $k);
        });
        return $self->_reply($c, $req, 500, ['Content-Type' => 'application/json'],
                             qq({"error":"try later ($n)"}), close => 1)
            if $n <= $self->{fails};
        return $self->_reply($c, $req, 204, [], '', close => 1);
    }
    if ($path =~ m{^/redirect(/|$)}) {
        return $self->_reply($c, $req, 302,
                             [Location => "http://$self->{addr}:$self->{port}/landed"],
                             "moved\n", close => 1);
    }
    if ($path =~ m{^/status/(\d{3})(/|$)}) {
        return $self->_reply($c, $req, $1, ['Content-Type' => 'application/json'],
                             '{"error":"scripted"}', close => 1);
    }
    return $self->_reply($c, $req, 204, [], '', close => 1);
}

1;
