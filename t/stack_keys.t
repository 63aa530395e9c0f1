#!/usr/bin/env perl
# `make rotate-secret` and `make retire-secret KID=...` on the stack of
# `make up` (README "Rotating the signing secret"): make up signs with the
# keys file of its state directory (one key, the legacy one, around the
# secret it generated); a rotation adds a key that signs from then on,
# reloads both nginx instances and restarts the runner, while a run is in
# the middle of its work: the run goes on and completes, its sandbox's
# token (the old key's, in its environment) passing the egress proxy
# after the rotation.  New tokens (make token, the next run's sandbox
# token) carry the new kid; old ones (the printed token and dashboard
# link, a token of the bare secret) still work.  Retiring the old key
# refuses them all, on /mcp, the dashboard and the egress proxy; the key
# that signs cannot be retired, nor an unknown one, and a bad KID changes
# nothing.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use HTTP::Tiny;
use Test::More;
use SMCP::Test qw(:all);
use SMCP::Docker qw(docker_available docker run_token);
use SMCP::Fakes;
use SMCP::MakeUp;
use SMCP::Stack qw(bash_step);

my $root = repo_root();

require_prereqs('build/smcp-token and the module (run `make`)')
    unless -x "$root/build/smcp-token" && -f module_path();
require_prereqs('dockerd (make docker-ready)') unless docker_available();

# the model: a run held at its first step until the test opens a gate,
# then a bash step, whose result the model gets in a request made after
# the rotation
my $gates = tempdir('smcp-stack-keys-XXXXXX', TMPDIR => 1, CLEANUP => 1);
sub held {
    my ($name, $then) = @_;
    return sub {
        spew("$gates/$name.asked", '1');
        my $t0 = time;
        select(undef, undef, undef, 0.2) until -e "$gates/$name.open" || time - $t0 > 900;
        return $then;
    };
}
my $script = SMCP::Fakes::scenario_script({
    'SCENARIO-ROTATE' => [ held('rotate', bash_step('echo after the rotation', 'After the rotation')),
                           { text => 'Rotated run done.' } ],
    'SCENARIO-NEWKEY' => [ held('newkey', { text => 'New key run done.' }) ],
});

my $up = SMCP::MakeUp->new(script => [ $script ]);
my ($state, $port, $eport, $fake) = map { $up->$_ } qw(state port eport fake);
(my $gw = $ENV{SMCP_SANDBOX_SUBNET}) =~ s{\.0/24$}{.1};
my $ht = HTTP::Tiny->new(timeout => 30);
my @sessions;

# the keys of the keys file, in order: ([kid, flag], ...)
sub keys_now {
    return map { [ (split ' ')[0, 2] ] } grep { !/^\s*(#|$)/ } split /\n/, slurp("$state/keys");
}

sub mcp_status { return $up->post($_[0], json_encode({ jsonrpc => '2.0', id => 1,
    method => 'initialize', params => { protocolVersion => '2025-11-25',
        capabilities => {}, clientInfo => { name => 't', version => '1' } } }))->{status} }

sub dash_status {
    my ($link) = @_;
    my ($path) = $link =~ m{^https?://[^/]+(/.*)$};
    return SMCP::Test->client(port => $port)->http(method => 'GET', path => $path)->{status};
}

sub egress_status {
    my ($tok) = @_;
    return $ht->post("http://$gw:$eport/anthropic/v1/messages", {
        headers => { 'x-api-key' => $tok, 'content-type' => 'application/json' },
        content => '{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}',
    })->{status};
}

# a run's sandbox token (SMCP::Docker::run_token: a pooled sandbox's too)
sub sandbox_token { return run_token($_[0]) }

sub token_tool { my $t = `$root/build/smcp-token @_ 2>/dev/null`; chomp $t; return $t }

my ($rc, $out) = $up->up;
is($rc, 0, 'make up') or diag($out);
my ($token0) = $out =~ m{^  Token:\s+(\S+)}m;
my ($dash0) = $out =~ m{^  Dashboard:\s+(\S+)}m;

###############################################################################
# make up's keys: one, the legacy one, around its secret

my @k = keys_now();
is(scalar @k, 1, 'make up: a keys file of one key');
my $kid0 = $k[0][0];
like($kid0, qr/^k\d{14}-[0-9a-f]{4}$/, "... its kid, $kid0");
is($k[0][1], 'legacy', '... the legacy key (tokens without kid)');
is(sprintf('%o', (stat "$state/keys")[2] & 07777), '600', '... mode 600');
like(slurp("$state/nginx.conf"), qr{^\s*sandbox_mcp_keys_file \Q$state\E/keys;$}m,
     'nginx.conf reads it');
like(slurp("$state/egress.conf"), qr{^\s*sandbox_mcp_keys_file \Q$state\E/keys;$}m,
     'egress.conf reads it');
is(jwt_kid($token0), $kid0, 'the printed token names it');
my $bare = token_tool("--sub stack-tenant --secret-file $state/secret");
is(jwt_kid($bare), '(none)', 'a token of the bare secret (make up\'s) names none');
is(mcp_status($bare), 200, '... and /mcp takes it');

# an egress token of the old key, for a run the egress sees running
my $live = 'run_' . rhex();
{
    local $ENV{REDISCLI_AUTH} = slurp("$state/redis-password");
    system("redis-cli -p $ENV{SMCP_REDIS_PORT} HSET smcp:run:$live tenant stack-tenant status running >/dev/null");
}
my $etok0 = token_tool("--sub stack-tenant --scope egress --run $live --ttl 900 --keys-file $state/keys");
is(egress_status($etok0), 200, 'egress: a run token of the old key passes');

###############################################################################
# a run in the middle of its work

my $sid = $up->initialize($token0);
ok($sid, 'a session with the printed token');
my $r1 = $up->call($token0, $sid, 'opencode_run_task',
                   { task => 'SCENARIO-ROTATE: keep working through a rotation' });
my $run1 = $r1->{runId} // '';
like($run1, qr/^run_[0-9a-f]{24}$/, 'a run');
push @sessions, $r1->{sessionId} // ();
ok(wait_until(600, sub { -e "$gates/rotate.asked" }, 0.5),
   '... its agent asked the model (held there)')
    or diag(`tail -30 $state/logs/runner.log`);
my $stok1 = sandbox_token($run1);
is(jwt_kid($stok1), $kid0, "... its sandbox's token is the old key's");

###############################################################################
# make rotate-secret

my $rpid = (slurp("$state/runner.pid") =~ /(\d+)/)[0] // 0;
($rc, $out) = $up->make('rotate-secret');
is($rc, 0, 'make rotate-secret') or diag($out);
my $rotated = time;
@k = keys_now();
is(scalar @k, 2, '... two keys');
my $kid1 = $k[0][0];
isnt($kid1, $kid0, "... a new one first, $kid1: it signs");
is_deeply($k[1], [ $kid0, 'legacy' ], '... the old one after it, still the legacy key');
like($out, qr/^key \Q$kid1\E signs from now on/m, '... said so');
like($out, qr/^egress nginx reloaded$/m, '... the egress instance reloaded');
like($out, qr/^nginx reloaded$/m, '... the MCP instance reloaded');
my ($rpid1) = $out =~ /^runner restarted \(pid (\d+)\)$/m;
ok($rpid1 && $rpid1 != $rpid && kill(0, $rpid1), '... the runner restarted')
    or diag($out);
unlike($out, qr/[0-9a-f]{64}/, '... no secret printed');

# the run goes on: its next request, after the rotation, carries the old
# key's token through the egress
spew("$gates/rotate.open", '1');
my $res = $up->wait_done($token0, $sid, $run1, 600);
is($res->{status}, 'completed', 'the run in the middle of the rotation completes')
    or diag(explain($res), `tail -40 $state/logs/runner.log`);
is($res->{result}, 'Rotated run done.', '... with the model\'s last answer');
my @after = grep { $_->{time} > $rotated && ($_->{path} // '') eq '/v1/messages' }
            $fake->requests;
ok(scalar(@after), '... its model was asked after the rotation, through the egress '
                   . '(' . scalar(@after) . ' requests)');

# new tokens carry the new kid; old ones still work
my ($mrc, $mtok) = run_cmd([ 'make', '-s', '-C', $root, 'token', 'SUB=stack-tenant' ]);
chomp $mtok;
is(jwt_kid($mtok), $kid1, 'make token: the new key signs');
is(mcp_status($mtok), 200, '... /mcp takes it');
is(mcp_status($token0), 200, 'the printed token (old key) still works');
is(mcp_status($bare), 200, 'a token without kid still works (the legacy key)');
is(dash_status($dash0), 303, 'the printed dashboard link (old key) still opens');
is(egress_status($etok0), 200, 'egress: a run token of the old key still passes');

my $r2 = $up->call($mtok, $up->initialize($mtok), 'opencode_run_task',
                   { task => 'SCENARIO-NEWKEY: a run after the rotation' });
push @sessions, $r2->{sessionId} // ();
ok(wait_until(600, sub { -e "$gates/newkey.asked" }, 0.5), 'a new run started');
is(jwt_kid(sandbox_token($r2->{runId} // '')), $kid1, "... its sandbox's token names the new key");
spew("$gates/newkey.open", '1');

###############################################################################
# make retire-secret

($rc, $out) = $up->make('retire-secret', "KID=$kid1");
isnt($rc, 0, 'make retire-secret of the signing key: refused');
like($out, qr/KID=\Q$kid1\E signs: make rotate-secret first/, '... said so');
($rc, $out) = $up->make('retire-secret', 'KID=k-none');
isnt($rc, 0, 'make retire-secret of an unknown key: refused');
like($out, qr/KID=k-none: no such key in \Q$state\E\/keys \(\Q$kid1 $kid0\E\)/, '... the keys named');
($rc, $out) = $up->make('retire-secret', 'KID=x;y');
isnt($rc, 0, 'make retire-secret KID=x;y: refused');
like($out, qr/KID=x;y: want a key id/, '... said so');
is(scalar(keys_now()), 2, '... the keys file unchanged');

($rc, $out) = $up->make('retire-secret', "KID=$kid0");
is($rc, 0, "make retire-secret KID=$kid0") or diag($out);
@k = keys_now();
is_deeply(\@k, [ [ $kid1, undef ] ], '... one key left, the new one');
like($out, qr/it was the legacy key: tokens without kid are refused/, '... said so');
ok(!-e "$state/secret", "... make up's bare secret removed with it");

is(mcp_status($token0), 401, '/mcp: the printed token (old key) is refused');
is(mcp_status($bare), 401, '/mcp: a token without kid is refused');
is(mcp_status($mtok), 200, '/mcp: a token of the new key works');
is(dash_status($dash0), 401, 'the dashboard: the old link is refused');
is(egress_status($etok0), 401, "egress: a run token of the old key is refused");
is(egress_status(token_tool("--sub stack-tenant --scope egress --run $live --ttl 900 --keys-file $state/keys")),
   200, 'egress: one of the new key passes');

$res = $up->wait_done($mtok, $up->initialize($mtok), $r2->{runId}, 600);
is($res->{status}, 'completed', 'the run after the rotation completes') or diag(explain($res));

# a second make up keeps the keys
($rc, $out) = $up->up;
is($rc, 0, 'make up again') or diag($out);
is_deeply([ keys_now() ], [ [ $kid1, undef ] ], '... the keys file as it was');
my ($token2) = $out =~ m{^  Token:\s+(\S+)}m;
is(jwt_kid($token2), $kid1, '... its token names the new key');

($rc, $out) = $up->down;
is($rc, 0, 'make down') or diag($out);
$up->stop_fakes;

END {
    # the session volumes of the runs above (the runner leaves them for
    # later runs of their session)
    docker('volume', 'rm', "smcp-$_") for @sessions;
}

done_testing;
