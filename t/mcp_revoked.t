#!/usr/bin/perl

# The revoked token ids past what a worker holds (issue 22, point 5):
# nginx with `sandbox_mcp_revoked_max 100` (the default is 50,000: a
# worker's table of at most 20 MiB, t/unit_common.t), Redis and the
# module's own scripts.
#
#   fail closed   150 ids revoked (revoke.lua, as `make revoke` and
#                 /oauth/revoke store them), more than the worker holds;
#                 then an operator revokes a token in use (smcp-token
#                 --revoke): it is refused on /mcp and on the dashboard
#                 (its ui token too); a token not revoked still works on
#                 both (Redis is asked, the worker never waits on it); the
#                 log says the worker asks Redis; once the extra ids have
#                 expired the worker holds them all again and says so
#   /oauth/revoke a tenant makes at most sandbox_mcp_oauth_revoke_rate new
#                 revoked ids a minute (then 503 temporarily_unavailable
#                 with Retry-After, the token not revoked and still
#                 working); another tenant is not held back; a token
#                 already expired adds nothing; one revoked twice counts
#                 once
#
# Needs nginx + the module, redis-server and build/smcp-token; CI=true
# turns skips into failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(json_decode rhex repo_root wait_until prereq_fail lua_script);
use SMCP::OAuth;

my $MAX = 100;
my $RATE = 3;
my $P = 'smcp:';

my $t = SMCP::Test->new(
    workers => 2,
    http    => "sandbox_mcp_revoked_max $MAX;",
    server  => qq{
        sandbox_mcp_oauth on;
        sandbox_mcp_oauth_revoke_rate $RATE;
        location /.well-known/ { sandbox_mcp_oauth_endpoints; }
        location /oauth/ { sandbox_mcp_oauth_endpoints; }
        location /ui/ { sandbox_mcp_ui; }},
);
$t->start;

my $bin = SMCP::Test::token_tool_path();
prereq_fail("$bin missing (run `make`)") unless -x $bin;
my $redis_addr = '127.0.0.1:' . $t->redis_port;
my $revoke_lua = lua_script(repo_root() . '/ngx_sandbox_mcp_module/common/scripts',
                            'revoke');

sub ping {
    my ($tok, $sid) = @_;
    my $r = $t->mcp_post($t->request_msg('ping'), token => $tok, session => $sid);
    return $r->{status};
}

sub dashboard {
    my ($uitok) = @_;
    return $t->http(method => 'GET', path => '/ui/api/runs',
                    headers => [ Cookie => "smcp_ui=$uitok" ])->{status};
}

# `make revoke`: the operator's tool
sub make_revoke {
    my ($tok) = @_;
    my $out = `$bin --revoke '$tok' --redis $redis_addr 2>&1`;
    is($? >> 8, 0, 'smcp-token --revoke') or diag($out);
}

# n ids revoked as revoke.lua stores them, living $ttl seconds
sub fill {
    my ($n, $ttl) = @_;
    my $now = int(time());
    for my $i (1 .. $n) {
        $t->redis('EVAL', $revoke_lua, 3, "${P}revoked", "${P}revoked:exp", "${P}revoked",
                  "fill-$i-" . rhex(4), $now + $ttl, $now);
    }
}

subtest 'past the bound: fail closed, never fail open' => sub {
    my $victim = $t->token(sub => 'alice', jti => 'victim-' . rhex(4));
    my $other = $t->token(sub => 'alice', jti => 'other-' . rhex(4));
    my $uivictim = $t->token(scope => 'ui', repos => undef, jti => 'uivictim-' . rhex(4));
    my $uiother = $t->token(scope => 'ui', repos => undef, jti => 'uiother-' . rhex(4));
    my ($sid) = $t->initialize(token => $victim);
    my ($sid2) = $t->initialize(token => $other);
    ok(wait_until(30, sub { ping($victim, $sid) == 200 }), 'a token in use works');
    is(dashboard($uivictim), 200, '... its dashboard link too');

    fill($MAX + 50, 25);
    ok(wait_until(10, sub { $t->error_log =~ /more revoked token ids than sandbox_mcp_revoked_max \($MAX\)/ }),
       'the workers say they hold no more and ask Redis');

    make_revoke($victim);
    make_revoke($uivictim);
    is($t->redis('HLEN', "${P}revoked"), $MAX + 52, 'Redis has them all');
    for my $i (1 .. 4) {     # every worker, cached token or not
        is(ping($victim, $sid), 401, "the revoked token on /mcp: 401 ($i)");
        is(dashboard($uivictim), 401, "the revoked ui token on the dashboard: 401 ($i)");
    }
    my $r = $t->mcp_post($t->request_msg('ping'), token => $victim, session => $sid);
    like($r->{headers}{'www-authenticate'} // '', qr/token revoked/, '... saying "token revoked"');
    is($t->http(path => '/ui/?token=' . $uivictim)->{status}, 401,
       '... its link (?token=) too');
    for my $i (1 .. 4) {
        is(ping($other, $sid2), 200, "a token not revoked: 200 ($i)");
        is(dashboard($uiother), 200, "a ui token not revoked: 200 ($i)");
    }
    is($t->http(path => '/ui/?token=' . $uiother)->{status}, 303, '... its link sets its cookie');

    # the extra ids expire: the workers read the ids again and hold them
    ok(wait_until(60, sub { $t->error_log =~ /the revoked token ids fit again/ }),
       'the ids expired: the workers hold them all again') or diag($t->error_log);
    is(ping($victim, $sid), 401, 'the revoked token: still 401');
    is(dashboard($uivictim), 401, 'the revoked ui token: still 401');
    is(ping($other, $sid2), 200, 'the other: still 200');
};

subtest '/oauth/revoke: a budget per tenant' => sub {
    my $o = SMCP::OAuth->new($t);
    my $client = $o->register;
    my ($tok) = $o->sign_in($client, key => $t->token(sub => 'rita'));
    ok($tok->{access_token}, 'signed in');
    my @at = ($tok->{access_token});
    my $rt = $tok->{refresh_token};
    for (1 .. $RATE + 1) {
        my $n = $o->token(grant_type => 'refresh_token', refresh_token => $rt,
                          client_id => $client->{client_id})->{json};
        push @at, $n->{access_token};
        $rt = $n->{refresh_token};
    }
    my $revoke = sub { $o->post('/oauth/revoke', SMCP::OAuth::form(token => $_[0])) };
    my ($sid0) = $t->initialize(token => $at[0]);
    my $n0 = $t->redis('HLEN', "${P}revoked");
    for my $i (0 .. $RATE - 1) {
        is($revoke->($at[$i])->{status}, 200, "revocation " . ($i + 1) . ": 200");
    }
    is($revoke->($at[0])->{status}, 200, 'the first again: 200 (counted once)');
    my $r = $revoke->($at[$RATE]);
    is($r->{status}, 503, "revocation " . ($RATE + 1) . " in the minute: 503");
    is($r->{json}{error}, 'temporarily_unavailable', '... temporarily_unavailable');
    ok(($r->{headers}{'retry-after'} // 0) > 0, '... with Retry-After');
    is($t->redis('HLEN', "${P}revoked"), $n0 + $RATE, "$RATE new ids, no more");
    my ($sid) = $t->initialize(token => $at[$RATE]);
    ok($sid, '... the token not revoked still works');
    ok(wait_until(30, sub { ping($at[0], $sid0) == 401 }), 'a revoked one is refused');

    my ($tb) = $o->sign_in($client, key => $t->token(sub => 'bert'));
    is($revoke->($tb->{access_token})->{status}, 200, 'another tenant meanwhile: 200');

    my $expired = $t->token(sub => 'rita', jti => 'x-' . rhex(4), exp => time() - 5,
                            extra => { aud => $o->resource });
    my $n1 = $t->redis('HLEN', "${P}revoked");
    is($revoke->($expired)->{status}, 200, 'a token already expired: 200');
    is($t->redis('HLEN', "${P}revoked"), $n1, '... nothing stored');
};

$t->done;
