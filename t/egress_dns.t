#!/usr/bin/env perl
# Upstream names are resolved while nginx runs (a `resolver` and proxy_pass
# through a variable), against a DNS server this test runs on loopback
# (dnsmasq on a free port, answering from a hosts file it re-reads on
# SIGHUP, TTL 1 s):
#
#   - nginx starts, and /mcp answers, while an upstream name does not
#     resolve; that route answers a JSON 502 naming the upstream
#   - once the name is added, the route works; when it moves to another
#     address (a second fake on 127.0.0.2), egress follows within the TTL
#   - TLS through a resolved name: SNI is the name and the certificate is
#     verified against it (a test CA); a certificate for another name: 502
#   - GITHUB_API_URL with a path (GitHub Enterprise: https://HOST/api/v3)
#   - the routes script takes the resolver from resolv.conf by default

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp ();
use IO::Socket::INET;
use MIME::Base64 qw(encode_base64);
use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(:all);
use SMCP::Fakes;

my $routes_sh = egress_routes_script();
my $dnsmasq = which_bin('dnsmasq');
require_prereqs('dnsmasq (apt-get install dnsmasq-base; .ci/install-deps)') unless $dnsmasq;
my $t = SMCP::Test->new(workers => 2);
my $dir = $t->dir;

# the resolver of the routes script: resolv.conf by default
{
    my $t0 = File::Temp->new;
    print $t0 "# x\nnameserver 10.1.2.3\nnameserver ::1\nnameserver fe80::1%eth0\nsearch example\n";
    close $t0;
    delete local $ENV{SMCP_RESOLVER};
    local $ENV{SMCP_RESOLV_CONF} = $t0->filename;
    my $out = `$routes_sh`;
    like($out, qr/^resolver 10\.1\.2\.3 \[::1\] ipv6=off;$/m,
         'resolver: the nameservers of resolv.conf (IPv6 in brackets, no link-local)');
    local $ENV{SMCP_RESOLVER} = '127.0.0.11';
    local $ENV{SMCP_RESOLVER_VALID} = '30s';
    $out = `$routes_sh`;
    like($out, qr/^resolver 127\.0\.0\.11 valid=30s ipv6=off;$/m, 'resolver: SMCP_RESOLVER wins');
    delete local $ENV{SMCP_RESOLVER};
    open(my $fh, '>', $t0->filename) or die $!;
    print $fh "search example\n";
    close $fh;
    $out = `$routes_sh 2>&1`;
    isnt($?, 0, 'no nameserver: the script says so');
    like($out, qr/SMCP_RESOLVER/, '... and names SMCP_RESOLVER');
}

###############################################################################
# dnsmasq on a free loopback port (UDP and TCP)

my $dport;
for (1 .. 20) {
    my $p = $t->free_port;
    my $u = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $p, Proto => 'udp')
        or next;
    close $u;
    $dport = $p;
    last;
}
my $hosts = "$dir/hosts";
my $dlog = "$dir/dnsmasq.log";

sub hosts {
    my (%h) = @_;
    open(my $fh, '>', "$hosts.tmp") or die $!;
    print $fh map { "$h{$_} $_\n" } sort keys %h;
    close $fh;
    rename("$hosts.tmp", $hosts) or die $!;
}

sub reads { my @r = $t->read_file($dlog) =~ /read \Q$hosts\E/g; return scalar @r }

my %names = map { $_ => '127.0.0.1' } qw(tls.smcp.test wrong.smcp.test ghe.smcp.test);
hosts(%names);
my $dpid = $t->spawn('dnsmasq', "$dir/dnsmasq.out", $dnsmasq, '--keep-in-foreground',
    '--conf-file=/dev/null', '--no-resolv', '--no-hosts', "--addn-hosts=$hosts",
    '--listen-address=127.0.0.1', '--bind-interfaces', "--port=$dport",
    '--local-ttl=1', '--user=' . getpwuid($>), '--pid-file=', "--log-facility=$dlog",
    '--log-queries');
ok(wait_until(30, sub { reads() >= 1 }), "dnsmasq on 127.0.0.1:$dport read its hosts file")
    or diag($t->read_file("$dir/dnsmasq.out"));

sub dns_hup {
    my $n = reads();
    kill 'HUP', $dpid;
    return wait_until(30, sub { reads() > $n });
}

###############################################################################
# upstreams: two fakes at one port on two loopback addresses, a TLS server
# with a certificate from a test CA, a fake GitHub

my $real = 'sk-REAL-' . rhex();
my $f1 = SMCP::Fakes::start_openai(key => $real, text => 'from one');
my $f2 = eval { SMCP::Fakes::start_openai(key => $real, text => 'from two',
                                          addr => '127.0.0.2', port => $f1->port) };
SMCP::Test::give_up("cannot listen on 127.0.0.2:" . $f1->port . ": $@") unless $f2;
my $gh = SMCP::Fakes::start_github(token => $real);
$gh->create_repo('owner/repo', files => { 'README.md' => "ghe\n" });

ok(eval { test_cert($dir, 'tls', 'DNS:tls.smcp.test') },
   'a test CA and a certificate for tls.smcp.test')
    or diag($@);

my $tport = $t->free_port;
my $eport = $t->free_port;
my $up = 'http://up.smcp.test:' . $f1->port;

$ENV{$_} = $real for qw(COMPAT_API_KEY OPENAI_API_KEY GOOGLE_API_KEY GITHUB_TOKEN);
delete @ENV{qw(ANTHROPIC_API_KEY AZURE_OPENAI_API_KEY CF_AIG_TOKEN)};
ok(eval { $t->render_routes(
    COMPAT_BASE_URL => $up,
    OPENAI_BASE_URL => "https://tls.smcp.test:$tport",
    GOOGLE_BASE_URL => "https://wrong.smcp.test:$tport",
    GITHUB_URL      => 'http://ghe.smcp.test:' . $gh->port,
    GITHUB_API_URL  => 'http://ghe.smcp.test:' . $gh->port . '/api/v3/',
    SMCP_CA_BUNDLE  => "$dir/ca.crt",
    SMCP_RESOLVER   => "127.0.0.1:$dport") }, 'egress-routes.sh renders the routes')
    or diag($@);

my $echo = q({"sni":"$ssl_server_name","host":"$http_host","uri":"$request_uri","auth":"$http_authorization"});
my $started = eval {
    $t->start(http => egress_server_conf("127.0.0.1:$eport") . <<"NGINX");
    server {
        listen 127.0.0.1:$tport ssl;
        ssl_certificate %%DIR%%/tls.crt;
        ssl_certificate_key %%DIR%%/tls.key;
        default_type application/json;
        location / { return 200 '$echo'; }
    }
NGINX
    1;
};
ok($started, 'nginx starts while up.smcp.test does not resolve') or diag($@);
SMCP::Test::give_up('nginx did not start') unless $started;

my ($sid) = $t->initialize;
ok($sid, '/mcp answers meanwhile');

my ($run, $tok) = $t->live_run(repository => 'https://ghe.smcp.test/owner/repo');

sub egress {
    my ($path, %o) = @_;
    return $t->http(port => $eport, method => $o{method} // 'POST', path => $path,
                    headers => [ Authorization => "Bearer $tok", 'x-goog-api-key' => $tok,
                                 'Content-Type' => 'application/json' ],
                    body => $o{method} ? undef : '{"model":"m","messages":[{"role":"user","content":"hi"}]}',
                    timeout => 15);
}
my $chat = '/compat/v1/chat/completions';

###############################################################################
# a name missing, added, moved

{
    my $r = egress($chat);
    is($r->{status}, 502, 'a name that does not resolve: 502');
    my $j = json_decode($r->{body}) // {};
    is($j->{type}, 'error', '... a JSON error');
    like($j->{error}{message} // '', qr/\Q$up\E.*resolve/, '... naming the upstream and DNS');
    like($t->error_log, qr/up\.smcp\.test could not be resolved/, '... nginx logged why');

    hosts(%names, 'up.smcp.test' => '127.0.0.1');
    ok(dns_hup(), 'up.smcp.test added (dnsmasq re-read its hosts)');
    my $t0 = time();
    ok(wait_until(30, sub { egress($chat)->{status} == 200 }), 'the route works once the name resolves');
    note(sprintf('added: answered after %.2f s', time() - $t0));
    is(scalar @{ $f1->requests(path => '/v1/chat/completions') } > 0, 1, '... at 127.0.0.1');
    is($f1->last_request->{headers}{host}, 'up.smcp.test:' . $f1->port, '... with Host: the name');

    hosts(%names, 'up.smcp.test' => '127.0.0.2');
    ok(dns_hup(), 'up.smcp.test moved to 127.0.0.2');
    $t0 = time();
    my $moved = wait_until(30, sub {
        egress($chat);
        return scalar @{ $f2->requests(path => '/v1/chat/completions') };
    }, 0.1);
    my $took = time() - $t0;
    ok($moved, 'egress follows the name to the second fake');
    # by the answer's TTL (1 s), not a validity of its own (SMCP_RESOLVER_VALID,
    # 30 s in the check above) nor never
    ok($took < 10, sprintf('... within a few TTLs (1 s; took %.2f s)', $took));
    # each worker caches the answer for its TTL, counted by nginx in whole
    # seconds (an answer of TTL 1 may serve until the end of the next
    # second): past that, every one follows
    sleep(2.5);
    my $n1 = scalar @{ $f1->requests };
    egress($chat) for 1 .. 6;
    is(scalar @{ $f1->requests }, $n1, '... and stays there (every worker, past the TTL)');

    hosts(%names);
    ok(dns_hup(), 'up.smcp.test removed');
    ok(wait_until(30, sub { egress($chat)->{status} == 502 }), 'the route answers 502 again');
}

###############################################################################
# TLS through a resolved name: SNI and verification

{
    my $r = egress('/openai/v1/responses');
    is($r->{status}, 200, 'TLS upstream by name, verified against the test CA');
    my $j = json_decode($r->{body}) // {};
    is($j->{sni}, 'tls.smcp.test', '... SNI is the upstream name');
    is($j->{host}, "tls.smcp.test:$tport", '... so is Host');
    is($j->{auth}, "Bearer $real", '... with the real key');
    is($j->{uri}, '/v1/responses', '... at the path');

    $r = egress('/google/v1beta/models/g:streamGenerateContent');
    is($r->{status}, 502, 'a certificate for another name: 502');
    like($t->error_log, qr/upstream SSL certificate does not match "wrong\.smcp\.test"/,
         '... the name check refused it');
}

###############################################################################
# GitHub Enterprise: an API URL with a path

{
    my $r = egress('/github-api/repos/owner/repo', method => 'GET');
    is($r->{status}, 200, 'GITHUB_API_URL with /api/v3: the repository lookup');
    my $req = $gh->last_request;
    is($req->{path}, '/api/v3/repos/owner/repo', '... reached /api/v3/repos/owner/repo');
    is($req->{headers}{host}, 'ghe.smcp.test:' . $gh->port, '... at the resolved name');

    my $basic = 'Basic ' . encode_base64("x-access-token:$tok", '');
    my $out = `git -c 'http.extraHeader=Authorization: $basic' clone -q http://127.0.0.1:$eport/github/owner/repo.git $dir/clone 2>&1`;
    is($?, 0, 'git clone through a resolved GITHUB_URL') or diag($out);
    ok(-f "$dir/clone/README.md", '... has the files');
}

like($t->read_file($dlog), qr/query\[A\] up\.smcp\.test from 127\.0\.0\.1/,
     'nginx asked the test DNS server');

$_->stop for ($f1, $f2, $gh);
$t->done;
