#!/usr/bin/env perl
# Limits of the egress proxy:
#   - requests per run (limit_req keyed by $sandbox_mcp_token_run, the run
#     of a token whose signature, expiry and scope check out, without
#     Redis), answered with a JSON 429 and Retry-After; a forged or expired
#     token never spends a run's budget
#   - requests at once per sandbox address (limit_conn): a JSON 429
#   - idle connections are closed after the header timeout
#   - a flood of idle connections to the egress listener: with egress and
#     /mcp in one nginx instance (the control) /mcp stops answering; with
#     the egress proxy as its own instance (as `make up` and docker-compose
#     run it) /mcp keeps answering promptly

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use Socket qw(MSG_DONTWAIT MSG_PEEK);
use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(:all);
use SMCP::Fakes;

my $real = 'sk-compat-REAL-' . rhex();
my $t = SMCP::Test->new(workers => 2);
my $compat = SMCP::Fakes::start_openai(key => $real);

# bad settings are refused by the script, not by nginx at start
for my $bad ([ SMCP_EGRESS_RATE => '10' ], [ SMCP_EGRESS_RATE => '1r/s; evil' ],
             [ SMCP_EGRESS_BURST => 'x' ], [ SMCP_EGRESS_CONN => '0' ],
             [ SMCP_EGRESS_HEADER_TIMEOUT => '1s; x' ]) {
    local $ENV{$bad->[0]} = $bad->[1];
    my $out = `${\egress_routes_script()} --http 2>&1`;
    isnt($?, 0, "egress-routes.sh refuses $bad->[0]=$bad->[1]");
}

# the key: in the environment of the routes script and of nginx's master;
# the routes of the other providers left out
$ENV{COMPAT_API_KEY} = $real;
my %NO_KEYS = map { ($_ => undef) } qw(ANTHROPIC_API_KEY OPENAI_API_KEY
    AZURE_OPENAI_API_KEY GOOGLE_API_KEY CF_AIG_TOKEN GITHUB_TOKEN);
my $eport = $t->free_port;
# 12 a minute: a request's slot comes back after 5 s, which the eleven
# requests below take far less than, however loaded the machine
$t->render_routes(%NO_KEYS, name => 'routes', COMPAT_BASE_URL => $compat->url,
              SMCP_EGRESS_RATE => '12r/m', SMCP_EGRESS_BURST => 3);
$t->start(http => egress_server_conf("127.0.0.1:$eport"));

my (%tok, %id);
($id{$_}, $tok{$_}) = $t->live_run() for qw(a b);
my $forged = $t->token(sub => 'alice', scope => 'egress', run => $id{a},
                       secret => 'not-the-secret-0123456789');
my $expired = $t->token(sub => 'alice', scope => 'egress', run => $id{a},
                        exp => int(time()) - 5);
my $mcp = $t->token(sub => 'alice', scope => 'mcp', run => $id{a});

my $body = '{"model":"m","messages":[{"role":"user","content":"hi"}]}';
sub call {
    my ($tok) = @_;
    return $t->http(port => $eport, method => 'POST', path => '/compat/v1/chat/completions',
                    headers => [ Authorization => "Bearer $tok",
                                 'Content-Type' => 'application/json' ],
                    body => $body, timeout => 10);
}

# forged, expired and MCP tokens naming run a: refused (401), and they do
# not count against run a (limit_req runs before the access phase)
for (1 .. 12) {
    is(call($_ % 3 == 0 ? $forged : $_ % 3 == 1 ? $expired : $mcp)->{status},
       401, "bad token $_ naming run a: 401, not 429");
}

my $t_a = time();
my @st = map { call($tok{a})->{status} } 1 .. 10;
is(scalar(grep { $_ == 200 } @st), 4, 'run a: 1 + burst 3 requests pass at once')
    or diag("@st");
is(scalar(grep { $_ == 429 } @st), 6, 'run a: the rest get 429');
my $r = call($tok{a});
is($r->{status}, 429, 'run a: still limited');
note(sprintf('the eleven requests of run a took %.2f s (a slot comes back after 5)',
             time() - $t_a));
my $j = json_decode($r->{body}) // {};
is($j->{type}, 'error', '429: a JSON error');
is($j->{error}{type}, 'rate_limit_error', '429: rate_limit_error');
is($r->{headers}{'retry-after'}, '1', '429: Retry-After: 1');
like($r->{headers}{'content-type'} // '', qr{application/json}, '429: application/json');

is(call($tok{b})->{status}, 200, 'run b: its own budget');
is(call($forged)->{status}, 401, 'a forged token for run a while a is limited: 401');

sleep(5.1);     # time passes: one request's slot comes back (12r/m)
is(call($tok{a})->{status}, 200, 'run a: passes again 5 s later (12r/m)');

# limited requests stop before the access phase: neither proxied nor
# audited (the audit is written after the response: wait for it)
my @d;
wait_until(30, sub {
    @d = map { $_->{json} } $t->run_events($id{a});
    return @d >= 5;
});
is(scalar(grep { $_->{status} == 200 } @d), 5, 'audit: the five granted requests of run a');
is(scalar(grep { $_->{status} == 429 } @d), 0, 'audit: no limited one');
is(scalar(@{ $compat->requests }), 6, 'upstream: exactly the granted requests (5 of a, 1 of b)');

###############################################################################
# connections

# routes with 2 requests at once per address and a 3 s header timeout;
# streams of 1 s between chunks: the third request comes while two go on
my $slow = SMCP::Fakes::start_openai(key => $real, chunk_delay => 1, deltas => 4);
$t->render_routes(%NO_KEYS, name => 'conn', COMPAT_BASE_URL => $slow->url, SMCP_EGRESS_RATE => '1000r/s',
              SMCP_EGRESS_CONN => 2, SMCP_EGRESS_HEADER_TIMEOUT => '3s');
my $d = $t->dir;

# the egress proxy as its own instance (one worker, 4096 connections), as
# `make up` and docker-compose run it
my $egress_port = $t->start_nginx(name => 'egress', workers => 1, conf => <<"NGINX");
%%LOAD_MODULE%%
%%USER%%
worker_processes 1;
worker_rlimit_nofile 10000;
daemon off;
master_process on;
pid %%DIR%%/nginx.pid;
error_log %%DIR%%/error.log info;
events { worker_connections 4096; }
http {
    access_log %%DIR%%/access.log;
    %%TEMP_PATHS%%
    sandbox_mcp_redis %%REDIS_ADDR%%;
    %%SECRET_CONF%%
    include $d/conn-http.conf;
    server {
        listen 127.0.0.1:%%PORT%%;
        include $d/conn.conf;
    }
}
NGINX

my $stream = '{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}';
sub start_stream {
    my ($port) = @_;
    return $t->http_start(port => $port, method => 'POST', path => '/compat/v1/chat/completions',
                          headers => [ Authorization => "Bearer $tok{b}",
                                       'Content-Type' => 'application/json' ],
                          body => $stream);
}

# limit_conn: two streams at once from one address, the third is refused
{
    my @p = map { start_stream($egress_port) } 1 .. 2;
    ok($slow->wait_requests(2, timeout => 30), 'two streams going on');
    my $r = $t->http(port => $egress_port, method => 'POST', path => '/compat/v1/chat/completions',
                     headers => [ Authorization => "Bearer $tok{b}", 'Content-Type' => 'application/json' ],
                     body => $stream, timeout => 10);
    is($r->{status}, 429, 'a third at once from the same address: 429');
    my $j = json_decode($r->{body}) // {};
    like($j->{error}{message} // '', qr/at once from this sandbox/, '... a JSON error saying why');
    my @done = map { $t->http_finish($_, 40) } @p;
    is_deeply([ map { $_->{status} } @done ], [200, 200], 'the two streams complete');
    like($done[0]{body}, qr/\[DONE\]/, '... to the end');
    is($t->http(port => $egress_port, method => 'POST', path => '/compat/v1/chat/completions',
                headers => [ Authorization => "Bearer $tok{b}", 'Content-Type' => 'application/json' ],
                body => $body)->{status}, 200, 'then a request passes again');
}

# connections that hold on: opened, then (every other one, $partial) the
# start of a request header and nothing more.  (nginx closes connections
# that sent nothing when it runs short; a started header it keeps until
# client_header_timeout.)  %$opened: fileno => when it was opened.
sub flood {
    my ($port, $n, $partial, $opened) = @_;
    my @s;
    for my $i (1 .. $n) {
        my $at = time();
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                      Proto => 'tcp', Timeout => 10) or last;
        syswrite($s, "POST /compat/v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            if $partial && ($partial == 1 || $i % 2);
        $opened->{ fileno $s } = $at if $opened;
        push @s, $s;
    }
    return @s;
}

# how many of @s the other end closed (EOF waiting, or reset)
sub closed_by_peer {
    my $n = 0;
    for my $s (@_) {
        my $got = recv($s, my $buf, 1, MSG_PEEK | MSG_DONTWAIT);
        $n++ if (defined $got && $buf eq '') || (!defined $got && !$!{EAGAIN});
    }
    return $n;
}

# /mcp answers an initialize, $n times in a row, each within $timeout s:
# (answered, the slowest)
sub mcp_prompt {
    my ($port, $n, $timeout) = @_;
    my $worst = 0;
    for (1 .. $n) {
        my $t0 = time();
        my $r = $t->mcp_post($t->request_msg('initialize', {
                                 protocolVersion => '2025-11-25', capabilities => {},
                                 clientInfo => { name => 'flood', version => '1' } }),
                             port => $port, timeout => $timeout);
        return (0, time() - $t0) unless ($r->{status} // 0) == 200;
        $worst = time() - $t0 if time() - $t0 > $worst;
    }
    return (1, $worst);
}

# the control: /mcp and the egress listener in one instance (one worker of
# 1024 connections, the harness's default; a header timeout far longer
# than the flood and the checks take on a loaded machine, so that no
# connection of the flood times out and frees a slot meanwhile: 30 s did
# not hold under make test's load)
{
    $t->render_routes(%NO_KEYS, name => 'ctl', COMPAT_BASE_URL => $slow->url, SMCP_EGRESS_HEADER_TIMEOUT => '600s');
    my $shared_egress = $t->free_port;
    my $shared = $t->start_nginx(name => 'shared', workers => 1, http => <<"NGINX");
    include $d/ctl-http.conf;
    server {
        listen 127.0.0.1:$shared_egress;
        include $d/ctl.conf;
    }
NGINX
    my ($ok) = mcp_prompt($shared, 3, 10);
    ok($ok, 'control: a shared instance answers /mcp before the flood');
    my $t_flood = time();
    my @s = flood($shared_egress, 1200, 1);
    note(sprintf('%d connections with a started header to the shared egress '
                 . 'listener (%.1f s)', scalar(@s), time() - $t_flood));
    # a connect is done once the kernel holds it, not once nginx took it;
    # and a connection whose first bytes nginx has not read yet is one it
    # may close for a newcomer ("not enough, reusing connections", a warn).
    # Only the alert says no slot is free and none can be reused: until
    # it, one more started header at a time takes any slot left
    ok(wait_until(60, sub {
           push @s, flood($shared_egress, 1, 1);
           $t->error_log('shared')
               =~ /\[alert\][^\n]*worker_connections are not enough(?!, reusing)/;
       }), 'control: the shared instance runs out of connections');
    my ($ok2) = mcp_prompt($shared, 1, 3);
    ok(!$ok2, 'control: with egress in the same instance, /mcp is refused or does not answer')
        or diag(sprintf('%.1f s after the flood began; closed by nginx: %d',
                        time() - $t_flood, closed_by_peer(@s)));
    close $_ for @s;
    ok(wait_until(30, sub { (mcp_prompt($shared, 1, 10))[0] }),
       'control: /mcp answers again once the connections are gone');
    $t->stop_nginx('shared');
    $t->allow_log(qr/worker_connections are not enough/);
}

# egress as its own instance: /mcp (the main instance) is untouched
{
    my %opened;
    my @s = flood($egress_port, 3000, 2, \%opened);
    is(scalar(@s), 3000, '3000 connections to the egress listener (half with a started header)');

    # /mcp asked from a child meanwhile, while this process sees the
    # egress instance close each connection (its lifetime, from its open)
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $kid = fork() // die "fork: $!";
    if (!$kid) {
        close $rd;
        printf $wr "%d %.3f\n", mcp_prompt($t->port, 10, 10);
        close $wr;
        POSIX::_exit(0);
    }
    close $wr;
    my $sel = IO::Select->new(@s);
    my %life;
    my $t0 = time();
    while (keys(%life) < @s && time() - $t0 < 60) {
        for my $c ($sel->can_read(0.5)) {
            my $n = sysread($c, my $buf, 1);
            next if $n;
            $life{ fileno $c } = time() - $opened{ fileno $c };
            $sel->remove($c);
        }
    }
    my ($ok, $worst) = split ' ', <$rd> // '0 0';
    close $rd;
    waitpid($kid, 0);
    ok($ok, '/mcp keeps answering during the flood');
    # the control answers none at all; 5 s is room for a loaded machine
    ok($worst < 5, sprintf('... promptly (slowest of 10: %.3f s)', $worst));

    my @life = sort { $a <=> $b } values %life;
    is(scalar(@life), scalar(@s), sprintf('egress closed every idle connection (%.1f s)',
                                          time() - $t0));
    # none before the header timeout (3 s); the first soon after it, where
    # the routes' default (10 s, without SMCP_EGRESS_HEADER_TIMEOUT) would
    # close none before 10 s (a loaded machine only makes the last later)
    ok(@life && $life[0] >= 2.5 && $life[0] < 9,
       sprintf('... by the header timeout (3 s): the first after %.2f s, the last %.2f s',
               @life ? @life[0, -1] : (0, 0)));
    close $_ for @s;
    is($t->http(port => $egress_port, method => 'POST', path => '/compat/v1/chat/completions',
                headers => [ Authorization => "Bearer $tok{b}", 'Content-Type' => 'application/json' ],
                body => $body)->{status}, 200, 'egress serves again');
}

$slow->stop;
$t->allow_log(qr/limiting requests/);
$compat->stop;
$t->done;
