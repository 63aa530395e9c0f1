#!/usr/bin/env perl
# Per-sandbox limits behind the swarm backend's relay (issue 22, point
# 10).  Under `SMCP_BACKEND=swarm make up` every sandbox reaches the egress
# listener through runner/egress-relay, so from one address: a limit keyed
# on the address was one limit shared by every tenant.  Here, without a
# swarm: the sandbox network with its rules (runner/sandbox-net, a small
# SMCP_EGRESS_CONNLIMIT), the egress proxy on its gateway (egress-routes.sh,
# SMCP_EGRESS_CONN=2), the relay started as the stack starts it
# (egress_relay_up) and connected to a session's internal network as
# `egress`, and two sandboxes there with tokens of two runs:
#
#   - requests at once: sandbox A holds two requests (an upstream that
#     never answers); its third is a 429, sandbox B's is served
#   - connections: A holds SMCP_EGRESS_CONNLIMIT connections through the
#     relay; its next one is closed by the relay, B's is served
#
# Needs root and Docker (a failure under CI=true).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;
use SMCP::Docker qw(:all);
use SMCP::Test qw(:all);
use SMCP::Fakes;

ensure_docker(root => 1);

my $CONNLIMIT = 6;
my $CONN = 2;
local $ENV{SMCP_EGRESS_CONNLIMIT} = $CONNLIMIT;

my $t = SMCP::Test->new(workers => 2);
my $dir = $t->{dir};

# an upstream that takes connections and never answers
my $hang = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                 Listen => 64, ReuseAddr => 1) or die "listen: $!";
my $openai = SMCP::Fakes::start_openai(key => 'sk-openai-REAL-' . rhex());

my $eport = $t->free_port;
my $net = sandbox_net_up(egress_port => $eport);
my $relay = egress_relay_up($net, port => $eport, limit => $CONNLIMIT, image => base_image());
note("relay $relay->{name} at $relay->{ip}, egress $net->{gateway}:$eport");

local $ENV{OPENAI_API_KEY} = $openai->key;
local $ENV{OPENAI_BASE_URL} = $openai->url;
local $ENV{COMPAT_API_KEY} = 'sk-compat-REAL-' . rhex();
local $ENV{COMPAT_BASE_URL} = 'http://127.0.0.1:' . $hang->sockport;
local $ENV{SMCP_EGRESS_CONN} = $CONN;
local $ENV{SMCP_EGRESS_RATE} = '1000r/s';
# idle connections stay long enough to be counted
local $ENV{SMCP_EGRESS_HEADER_TIMEOUT} = '120s';
ok(eval { $t->render_routes }, 'egress-routes.sh renders the routes') or diag($@);
$t->start(http => egress_server_conf("$net->{gateway}:$eport"));

my ($run_a, $tok_a) = $t->live_run;
my ($run_b, $tok_b) = $t->live_run;

# a session's network, the relay on it as `egress` (as the runner joins it)
my $session = create_network(internal => 1);
{
    my ($rc, $out, $err) = docker('network', 'connect', '--alias', 'egress',
                                  $session->{name}, $relay->{id});
    is($rc, 0, 'the relay joins the session network as `egress`') or diag($err);
}

# the sandboxes' client: `hold TOKEN REQUESTS IDLE` holds that many
# requests to the upstream that never answers and idle connections, says
# "held N" and sleeps; `get TOKEN` makes one request and prints its status
# (EOF: the connection was closed without an answer)
spew("$dir/client.pl", <<'PL');
use strict;
use IO::Socket::INET;
my ($cmd, $tok, $n, $idle) = @ARGV;
my $body = '{"model":"m","messages":[{"role":"user","content":"hi"}],"input":"hi"}';
sub req {
    my ($path) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => 'egress', PeerPort => $ENV{PORT},
                                  Timeout => 5) or return undef;
    print $s "POST $path HTTP/1.1\r\nHost: egress\r\nAuthorization: Bearer $tok\r\n"
        . "Content-Type: application/json\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    return $s;
}
if ($cmd eq 'hold') {
    my @keep;
    push @keep, grep { defined } map { req('/compat/v1/chat/completions') } 1 .. $n;
    push @keep, grep { defined } map { IO::Socket::INET->new(PeerAddr => 'egress',
        PeerPort => $ENV{PORT}, Timeout => 5) } 1 .. $idle;
    $| = 1;
    print "held " . scalar(@keep) . "\n";
    sleep 600;
}
my $s = req('/openai/v1/responses') or do { print "REFUSED\n"; exit };
$s->timeout(10);
my $line = <$s>;
print defined $line && $line =~ m{^HTTP/1\.1 (\d+)} ? "$1\n" : "EOF\n";
PL

my %c = (sandbox => 1, network => $session->{name},
         env => { PORT => $eport }, extra => ['-v', "$dir/client.pl:/c.pl:ro"]);
my $a = run_container(%c, cmd => ['perl', '/c.pl', 'hold', $tok_a, $CONN, 0]);
my $b = run_container(%c, cmd => ['sleep', '600']);

sub get {
    my ($id, $tok) = @_;
    my ($rc, $out, $err) = exec_in($id, ['perl', '/c.pl', 'get', $tok], timeout => 30,
                                   env => { PORT => $eport });
    chomp $out;
    return $out || "rc=$rc $err";
}

###############################################################################
# requests at once: per run token, not per (relay) address

ok(wait_until(60, sub { (docker('logs', $a))[1] =~ /held $CONN/ }),
   "sandbox A sent $CONN requests that are never answered");
my $last = '';
ok(wait_until(30, sub { ($last = get($a, $tok_a)) eq '429' }),
   "sandbox A's next request at once is refused: 429 (SMCP_EGRESS_CONN=$CONN)")
    or diag("last: $last");
is(get($b, $tok_b), '200', "sandbox B, behind the same relay address, is served: its own limit");

###############################################################################
# connections at once: per sandbox at the relay, not one count for the
# relay's address

my $cc = run_container(%c, cmd => ['perl', '/c.pl', 'hold', $tok_a, 0, $CONNLIMIT]);
ok(wait_until(60, sub { (docker('logs', $cc))[1] =~ /held $CONNLIMIT/ }),
   "sandbox C holds $CONNLIMIT idle connections (SMCP_EGRESS_CONNLIMIT)");
ok(wait_until(30, sub { get($cc, $tok_a) =~ /^(EOF|REFUSED)$/ }),
   '... its next connection is closed by the relay');
is(get($b, $tok_b), '200', 'sandbox B is still served');

remove_container($_) for ($a, $cc, $b);
docker('network', 'disconnect', '-f', $session->{name}, $relay->{id});
remove_network($session->{name});
$openai->stop;
$t->done;
