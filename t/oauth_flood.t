#!/usr/bin/perl

# Anonymous clients flooding what the OAuth server stores for anyone
# (issue 22, point 1), with the whole stack: nginx + the module, Redis
# (maxmemory with noeviction, as `make up` and compose run it, but with
# room for far less than the flood), the runner, the sandbox image with
# the real OpenCode and a fake model.
#
#   the shipped per-address limit   the locations oauth-locations.sh
#            renders (`make up`, compose): one address past its burst gets
#            a JSON 429 with Retry-After; another address does not
#   the global bounds   without a per-address limit (the flood from many
#            addresses): 20,000 registrations of the largest metadata
#            allowed and 20,000 GitHub sign-ins started; at most
#            sandbox_mcp_oauth_unused_clients clients no sign-in used and
#            sandbox_mcp_oauth_github_pending sign-ins are kept, the rest
#            refused with a clear error (503 temporarily_unavailable with
#            Retry-After; the sign-in back at the client with
#            error=temporarily_unavailable); a client metadata document
#            (the sibling anonymous write) refused too; Redis's memory
#            grows by no more than the stated bound (README, Directives:
#            7 KiB a client, 3 KiB a sign-in); an unused client
#            expires within sandbox_mcp_oauth_unused_client_ttl, a used
#            one lives sandbox_mcp_oauth_client_ttl and leaves the bound
#   a tenant    meanwhile and after: run_task, get_result and the
#            runner's finish work (the run completes with its result)
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.  Uses $SMCP_SANDBOX_IMAGE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Stack;
use SMCP::OAuth;
use SMCP::Fakes qw(start_static);
use SMCP::Test qw(json_encode json_decode);

my $N = 20_000;             # registrations, and as many sign-ins started
my $CLIENTS = 2000;         # sandbox_mcp_oauth_unused_clients
my $PENDING = 2000;         # sandbox_mcp_oauth_github_pending
my $CLIENT_BYTES = 7168;    # an unused client in Redis, at most (stated)
my $PENDING_BYTES = 3072;   # a sign-in under way, at most (stated)
my $ROOM = 48 << 20;        # Redis's maxmemory above its start: 20,000
                            # clients of 4.5 KB (90 MB) would not fit
my $P = 'smcp:';

$ENV{SMCP_TEST_GH_SECRET} = 'gh-secret';
my $docs = start_static();
my $D = $docs->port;

my $oauth = qq{
        sandbox_mcp_oauth on;
        sandbox_mcp_oauth_unused_clients $CLIENTS;
        sandbox_mcp_oauth_github_pending $PENDING;
        sandbox_mcp_oauth_github gh-client env:SMCP_TEST_GH_SECRET;}
    . SMCP::OAuth::client_metadata_conf($D);

my $s = SMCP::Stack->new(
    scripts => { 'SCENARIO-FLOOD' => [ { text => 'Done, flood or not.' } ] },
    server  => $oauth . q{
        location /.well-known/ { sandbox_mcp_oauth_endpoints; }
        location /oauth/ { sandbox_mcp_oauth_endpoints; }},
);
my $t = $s->t;
my $o = SMCP::OAuth->new($t);

sub used_memory {
    return (($t->redis('INFO', 'memory') // '') =~ /^used_memory:(\d+)/m) ? $1 : 0;
}

# requests on keep-alive connections, 500 a connection: {status => count}
# and the first answer of each status
sub flood {
    my ($n, $req) = @_;
    my (%count, %first);
    my $i = 0;
    while ($i < $n) {
        my $k = $n - $i < 500 ? $n - $i : 500;
        my @r = $t->http_keepalive(map { $req->($i + $_) } 0 .. $k - 1);
        die "no answer at request $i\n" unless @r && $r[0]{status};
        for my $r (@r) {
            last unless $r->{status};
            $count{ $r->{status} }++;
            $first{ $r->{status} } //= $r;
            $i++;
        }
    }
    return (\%count, \%first);
}

# the largest metadata a registration may carry: 8 redirect URIs of 512
# bytes, a name of 128
my @uris = map { 'https://flood.example/' . sprintf('%02d', $_) . ('a' x 488) } 1 .. 8;
my $md = json_encode({ client_name => 'F' x 128, redirect_uris => \@uris,
                       token_endpoint_auth_method => 'none' });
die 'not the largest URI' unless length($uris[0]) == 512;

sub register_req {
    my (%o) = @_;
    return { method => 'POST', path => '/oauth/register', body => $md,
             headers => [ 'Content-Type' => 'application/json' ], %o };
}

###############################################################################

subtest 'the shipped per-address limit' => sub {
    $t->render_oauth;
    my $dir = $t->dir;
    my $port = $t->start_nginx(name => 'shipped', http => "include $dir/oauth-http.conf;",
                               server => "include $dir/oauth.conf;");
    my ($count, $first) = flood(40, sub { register_req(port => $port) });
    ok($count->{201} && $count->{201} <= 32, "one address: $count->{201} of 40 registered (burst 30)");
    ok($count->{429}, "... then $count->{429} refused with 429");
    my $r = $first->{429};
    is(json_decode($r->{body})->{error}, 'temporarily_unavailable',
       '... an OAuth error in JSON') or diag($r->{body});
    like($r->{headers}{'content-type'}, qr{^application/json}, '... application/json');
    ok(($r->{headers}{'retry-after'} // 0) > 0, '... with Retry-After');
    is($t->http(%{ register_req(port => $port, local_addr => '127.0.0.2') })->{status}, 201,
       'another address meanwhile: 201');
    $t->stop_nginx('shipped');
};

# the sign-ins' client, and the largest request a sign-in keeps: a
# redirect URI of 512 bytes, a state of 512 that JSON doubles
my $redirect = 'http://127.0.0.1:9/' . ('r' x 493);
die 'not the largest URI' unless length($redirect) == 512;
my $client = $o->register(redirect_uris => [ $redirect, $o->{redirect} ]);

# the largest client metadata document: a URL of 512 bytes, 8 redirect
# URIs of 512, a name of 128
my $big_cimd = 'https://client.example/' . ('d' x 489);
die 'not the largest URL' unless length($big_cimd) == 512;
{
    my ($path) = $big_cimd =~ m{^https://[^/]+(/.*)$};
    $docs->set_file($path, json_encode({ client_id => $big_cimd, client_name => 'D' x 128,
        redirect_uris => \@uris, token_endpoint_auth_method => 'none' }));
    my $page = $o->authorize_page($o->auth_params({ client_id => $big_cimd },
                                                  challenge => (SMCP::OAuth::pkce())[1],
                                                  redirect_uri => $uris[0]));
    die "the largest metadata document was not taken: $page->{status}\n"
        unless $page->{status} == 200;
}
my $mem0 = used_memory();
$t->redis('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
$t->redis('CONFIG', 'SET', 'maxmemory', $mem0 + $ROOM);
note(sprintf('Redis: %.1f MB used, maxmemory %.1f MB', $mem0 / 2**20, ($mem0 + $ROOM) / 2**20));

# the host floor's Redis headroom (--min-free-redis, 160m by default) is
# more than the room this Redis has: a floor of a few MB, which the flood
# must not take either
my $runner = $s->start_runner(args => ['--min-free-redis', '4m']);
my $early = $s->run_task(task => 'SCENARIO-FLOOD: before the flood');

subtest "$N anonymous registrations" => sub {
    my $unused0 = $t->redis('ZCARD', "${P}oauth:unused");
    my ($count, $first) = flood($N, sub { register_req() });
    is($count->{201}, $CLIENTS - $unused0, "registered up to the bound ($CLIENTS unused clients)")
        or diag(explain($count));
    is($count->{503}, $N - $count->{201}, '... every other one refused with 503');
    my $r = $first->{503};
    my $j = json_decode($r->{body}) // {};
    is($j->{error}, 'temporarily_unavailable', '... error temporarily_unavailable (RFC 7591 JSON)');
    like($j->{error_description} // '', qr/too many clients/, '... saying why');
    ok(($r->{headers}{'retry-after'} // 0) > 0, '... Retry-After: ' . ($r->{headers}{'retry-after'} // ''));
    is($t->redis('ZCARD', "${P}oauth:unused"), $CLIENTS, "$CLIENTS unused clients kept");
    my $id = json_decode($first->{201}{body})->{client_id};
    my $ttl = $t->redis('TTL', "${P}oauth:client:$id");
    ok($ttl > 0 && $ttl <= 3600, "an unused client expires within the hour (TTL $ttl)");
};

subtest "$N GitHub sign-ins started" => sub {
    my ($v, $c) = SMCP::OAuth::pkce();
    my $state = '"' x 512;
    my @p = $o->auth_params($client, challenge => $c, state => $state,
                            redirect_uri => $redirect);
    my $page = $o->authorize_page(@p);
    my $form = SMCP::OAuth::form(@p, csrf => $page->{csrf}, action => 'github');
    my ($count, $first) = flood($N, sub {
        return { method => 'POST', path => '/oauth/authorize', body => $form,
                 headers => [ 'Content-Type' => 'application/x-www-form-urlencoded',
                              Cookie => $page->{cookie} ] };
    });
    is($count->{302}, $N, 'every one answered 302') or diag(explain($count));
    is($t->redis('ZCARD', "${P}oauth:signins"), $PENDING, "$PENDING sign-ins kept");
    my @pending = grep { /oauth:pending:/ } @{ $t->redis('KEYS', "${P}oauth:pending:*") };
    is(scalar @pending, $PENDING, "... $PENDING pending requests in Redis");
    my $last = $t->http(method => 'POST', path => '/oauth/authorize', body => $form,
        headers => [ 'Content-Type' => 'application/x-www-form-urlencoded',
                     Cookie => $page->{cookie} ]);
    my $q = SMCP::OAuth::query($last->{headers}{location});
    like($last->{headers}{location}, qr{^\Q$redirect\E\?}, 'past the bound: back to the client');
    is($q->{error}, 'temporarily_unavailable', '... error=temporarily_unavailable');
    is($q->{state}, $state, '... with its state');
};

subtest 'a client metadata document, the bound full' => sub {
    my $id = 'https://client.example/flood.json';
    $docs->set_file('/flood.json', json_encode({ client_id => $id, client_name => 'CIMD',
        redirect_uris => [ $o->{redirect} ], token_endpoint_auth_method => 'none' }));
    my $page = $o->authorize_page($o->auth_params({ client_id => $id },
                                                  challenge => (SMCP::OAuth::pkce())[1]));
    is($page->{status}, 503, 'refused: 503');
    like($page->{body}, qr/temporarily_unavailable/, '... saying so');
    ok(($page->{headers}{'retry-after'} // 0) > 0, '... with Retry-After');
    ok(!$t->redis('EXISTS', "${P}oauth:client:$id"), '... nothing cached');
};

subtest 'Redis memory within the stated bound' => sub {
    my $grew = used_memory() - $mem0;
    my $bound = $CLIENTS * $CLIENT_BYTES + $PENDING * $PENDING_BYTES;
    note(sprintf('Redis grew by %.1f MB; bound %.1f MB', $grew / 2**20, $bound / 2**20));
    ok($grew <= $bound, sprintf('%.1f MB <= %d clients x %d B + %d sign-ins x %d B',
                                $grew / 2**20, $CLIENTS, $CLIENT_BYTES, $PENDING, $PENDING_BYTES));
    my $key = "${P}oauth:client:$big_cimd";
    # its hash, and its entry in oauth:unused (the key again, a node)
    my $one = $t->redis('MEMORY', 'USAGE', $key) + length($key) + 128;
    ok($one < $CLIENT_BYTES, "the largest client (a metadata document): $one bytes");
    my ($pk) = @{ $t->redis('KEYS', "${P}oauth:pending:*") };
    my $pend = $t->redis('MEMORY', 'USAGE', $pk);
    ok($pend < $PENDING_BYTES, "a sign-in under way: $pend bytes");
};

subtest 'a sign-in takes its client out of the bound' => sub {
    my ($tok) = $o->sign_in($client, key => $t->token);
    ok($tok->{access_token}, 'signed in with an access key') or diag(explain($tok));
    my $key = "${P}oauth:client:$client->{client_id}";
    ok(!defined $t->redis('ZSCORE', "${P}oauth:unused", $key), '... no longer an unused client');
    ok($t->redis('TTL', $key) > 29 * 86400, '... it lives sandbox_mcp_oauth_client_ttl (30d)');
};

subtest 'the tenant, after the flood' => sub {
    my $res = $s->wait_done($early->{runId}, 300);
    is($res->{status}, 'completed', 'the run queued before: completed (the runner\'s finish)')
        or $s->diag_run($early->{runId}, $runner);
    $s->run_completed('run_task, get_result after the flood', $runner,
                      task => 'SCENARIO-FLOOD: after the flood');
    is($t->redis('CONFIG', 'GET', 'maxmemory')->[1], $mem0 + $ROOM, 'Redis kept its cap');
};

$s->done;
