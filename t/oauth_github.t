#!/usr/bin/perl

# "Sign in with GitHub" on the module's sign-in page, against a scripted
# fake GitHub OAuth server (SMCP::Fakes::start_github_oauth) reached only
# through internal locations (subrequests: the worker never blocks):
# the pending request bound to the browser, the code exchange, the user
# and organization lookups, allowed logins, @organizations and id:N with
# their repositories, the GitHub user's numeric id as tenant
# (github-<id>; the login a label); refusals: a login not allowed, the
# user denying at GitHub, another browser's callback, a callback used
# twice or made up; no GitHub token or client secret in the logs or in
# Redis.  Who someone is cannot be renamed (issue 22, point 4): a member
# renamed to another tenant's name stays its own tenant; a login rule
# follows the account that first signed in with it, not one that takes
# the freed login (an organization rule likewise); a refresh asks GitHub
# again: a member removed from the organization loses the grant at the
# next refresh, GitHub down keeps it (503, retry).  A rotation of the
# signing key keeps the grants; retiring the key that sealed one's GitHub
# token ends it.
#
# Needs nginx + the module and redis-server; CI=true turns skips into
# failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(rhex);
use SMCP::OAuth;
use SMCP::Fakes qw(start_github_oauth);

my $gh = start_github_oauth(orgs => { 'octo-bob' => ['acme', 'other'],
                                       'octo-carol' => ['acme'] });
my $G = $gh->url;
my $DAVE = $gh->id('octo-dave');

my $t = SMCP::Test->new(
    workers => 2,
    server  => qq{
        sandbox_mcp_oauth on;
        sandbox_mcp_oauth_github gh-client file:%%DIR%%/gh-secret;
        sandbox_mcp_oauth_github_authorize_url $G/login/oauth/authorize;
        sandbox_mcp_oauth_github_allow octo-alice acme/app;
        sandbox_mcp_oauth_github_allow id:$DAVE acme/ops;
        sandbox_mcp_oauth_github_allow \@acme acme/*,tools/cli;
        location /.well-known/ { sandbox_mcp_oauth_endpoints; }
        location /oauth/ { sandbox_mcp_oauth_endpoints; }
        location = /_smcp_github/token {
            internal;
            subrequest_output_buffer_size 64k;
            proxy_pass_request_headers off;
            proxy_pass_request_body off;
            proxy_method POST;
            proxy_set_header Accept application/json;
            proxy_pass $G/login/oauth/access_token;
        }
        location = /_smcp_github/user {
            internal;
            subrequest_output_buffer_size 64k;
            proxy_pass_request_headers off;
            proxy_set_header Authorization "Bearer \$arg_token";
            proxy_set_header Accept application/json;
            proxy_pass $G/user;
        }
        location = /_smcp_github/orgs {
            internal;
            subrequest_output_buffer_size 64k;
            proxy_pass_request_headers off;
            proxy_set_header Authorization "Bearer \$arg_token";
            proxy_pass $G/user/orgs;
        }},
);
SMCP::Test::_write_file("$t->{dir}/gh-secret", "gh-secret\n");
$t->start;

my $o = SMCP::OAuth->new($t);
my $client = $o->register;
my $issuer = $o->issuer;

# the sign-in page, then "Sign in with GitHub": (answer, params, page)
sub to_github {
    my (%o) = @_;
    my ($v, $c) = SMCP::OAuth::pkce();
    my @p = $o->auth_params($client, challenge => $c, state => $o{state} // 'gh-' . rhex(3));
    my $page = $o->authorize_page(@p);
    my $r = $o->consent($page, \@p, action => 'github');
    return ($r, \@p, $page, $v);
}

# GitHub's authorize page approves, the browser comes back: the answer
sub back_from_github {
    my ($r, $page, %o) = @_;
    my $loc = $r->{headers}{location} // '';
    my ($path) = $loc =~ m{^\Q$G\E(/.*)$};
    my $g = $t->http(port => $gh->port, path => $path, host => $gh->host);
    my ($cb) = ($g->{headers}{location} // '') =~ m{^\Q$issuer\E(/oauth/github/callback\?.*)$};
    return ($t->http(path => $cb // '/oauth/github/callback',
                     headers => [ Cookie => exists $o{cookie} ? $o{cookie} : $page->{cookie} ]),
            $cb);
}

sub exchange {
    my ($r, $v) = @_;
    my $q = SMCP::OAuth::query($r->{headers}{location});
    return $o->token(grant_type => 'authorization_code', code => $q->{code},
                     redirect_uri => $o->{redirect}, client_id => $client->{client_id},
                     code_verifier => $v)->{json};
}

subtest 'the sign-in page offers GitHub' => sub {
    my $page = $o->authorize_page($o->auth_params($client, challenge => (SMCP::OAuth::pkce())[1]));
    like($page->{body}, qr{class="github on"}, 'a "Sign in with GitHub" button');
};

subtest 'an allowed login' => sub {
    my ($r, $p, $page, $v) = to_github(state => 'st-alice');
    is($r->{status}, 302, 'to GitHub') or diag($r->{body});
    my $q = SMCP::OAuth::query($r->{headers}{location});
    like($r->{headers}{location}, qr{^\Q$G\E/login/oauth/authorize\?}, 'its authorize URL');
    is($q->{client_id}, 'gh-client', 'our GitHub client id');
    is($q->{redirect_uri}, "$issuer/oauth/github/callback", 'our callback');
    like($q->{state}, qr/^[0-9a-f]{32}$/, 'a state of ours');
    is($q->{scope}, 'read:org', 'read:org (an @organization rule exists)');
    ok(!defined $q->{client_secret}, 'no secret in the browser');

    my ($back) = back_from_github($r, $page);
    is($back->{status}, 302, 'back from GitHub: to the client') or diag($back->{body});
    my $cq = SMCP::OAuth::query($back->{headers}{location});
    like($back->{headers}{location}, qr{^\Q$o->{redirect}\E\?code=}, 'its redirect_uri');
    is($cq->{state}, 'st-alice', "the client's state");
    my $tok = exchange($back, $v);
    ok($tok->{access_token}, 'tokens') or diag(explain($tok));
    my (undef, $claims) = SMCP::Test::decode_jwt($tok->{access_token});
    is($claims->{sub}, 'github-' . $gh->id('octo-alice'),
       'the tenant is the GitHub user\'s numeric id');
    is_deeply($claims->{repos}, ['acme/app'], "the login's repositories");
    my ($sid) = $t->initialize(token => $tok->{access_token});
    ok($sid, '/mcp accepts it');
    my @tr = grep { $_->{path} eq '/login/oauth/access_token' } $gh->requests;
    is($tr[-1]{method}, 'POST', 'the code exchange is a POST') if @tr;
    ok(!grep({ ($_->{headers}{cookie} // '') ne '' } $gh->requests),
       'no browser cookie reaches GitHub');
};

subtest 'a member of an allowed organization' => sub {
    $gh->set(login => 'octo-bob');
    my ($r, $p, $page, $v) = to_github();
    my ($back) = back_from_github($r, $page);
    my $tok = exchange($back, $v);
    my (undef, $claims) = SMCP::Test::decode_jwt($tok->{access_token} // '');
    is($claims->{sub}, 'github-' . $gh->id('octo-bob'), "tenant octo-bob's id");
    is_deeply($claims->{repos}, ['acme/*', 'tools/cli'], "the organization's repositories");
};

subtest 'refusals' => sub {
    $gh->set(login => 'octo-eve');
    my ($r, $p, $page) = to_github(state => 'st-eve');
    my ($back) = back_from_github($r, $page);
    is($back->{status}, 302, 'a login not allowed: back to the client');
    my $q = SMCP::OAuth::query($back->{headers}{location});
    is($q->{error}, 'access_denied', '... access_denied');
    is($q->{state}, 'st-eve', '... with its state');
    ok(!$q->{code}, '... no code');

    $gh->set(login => 'octo-alice', deny => 1);
    ($r, $p, $page) = to_github(state => 'st-deny');
    ($back) = back_from_github($r, $page);
    $q = SMCP::OAuth::query($back->{headers}{location});
    is($q->{error}, 'access_denied', 'denied at GitHub: access_denied');
    $gh->set(deny => 0);

    ($r, $p, $page) = to_github();
    my ($b2, $cb) = back_from_github($r, $page, cookie => undef);
    is($b2->{status}, 403, 'the callback in another browser (no cookie): 403');
    ok(!$b2->{headers}{location}, '... no redirect');
    my $again = $t->http(path => $cb, headers => [ Cookie => $page->{cookie} ]);
    is($again->{status}, 400, 'the same callback again: 400 (one use)');

    is($t->http(path => '/oauth/github/callback?code=x&state=' . rhex(16))->{status}, 400,
       'a made-up state: 400');
    is($t->http(path => '/oauth/github/callback?code=x&state=../../x')->{status}, 400,
       'a malformed state: 400');
};

# a sign-in as whoever GitHub's authorize page approves now: the tokens
sub sign_in_as {
    my ($login) = @_;
    $gh->set(login => $login);
    my ($r, $p, $page, $v) = to_github();
    my ($back) = back_from_github($r, $page);
    return exchange($back, $v) // {};
}

sub claims { return (SMCP::Test::decode_jwt($_[0] // ''))[1] // {} }

sub refresh {
    my ($rt) = @_;
    return $o->token(grant_type => 'refresh_token', refresh_token => $rt,
                     client_id => $client->{client_id});
}

subtest 'a rename changes the label, never the tenant' => sub {
    # a tenant "alice" (an access key's) with a run
    my ($asid) = $t->initialize(token => $t->token(sub => 'alice'));
    my $run = SMCP::Test::sc($t->call_tool($asid, 'opencode_run_task', { task => 'alice work' },
                                           token => $t->token(sub => 'alice'))) // {};
    ok($run->{runId}, 'tenant alice has a run');

    my $tok = sign_in_as('octo-bob');
    my $bob = 'github-' . $gh->id('octo-bob');
    is(claims($tok->{access_token})->{sub}, $bob, 'octo-bob signs in as its id');
    $gh->rename('octo-bob', 'alice');
    $tok = sign_in_as('alice');
    is(claims($tok->{access_token})->{sub}, $bob, 'renamed to "alice": still its own tenant');
    is_deeply(claims($tok->{access_token})->{repos}, [ 'acme/*', 'tools/cli' ],
              '... with its organization\'s repositories, nothing more');
    my ($sid) = $t->initialize(token => $tok->{access_token});
    my $list = SMCP::Test::sc($t->call_tool($sid, 'opencode_list_runs', {},
                                            token => $tok->{access_token})) // {};
    is_deeply($list->{runs}, [], "... alice's runs are not its");
    my $res = $t->call_tool($sid, 'opencode_get_result', { runId => $run->{runId} },
                            token => $tok->{access_token});
    ok(SMCP::Test::is_error_result($res), "... nor alice's run") or diag(explain($res));
    my %labels = map { ($t->redis('HGET', $_, 'label') // '') => 1 } $t->redis_keys('smcp:oauth:family:*');
    ok($labels{alice}, 'the login now is the grant\'s label');
    $gh->rename('alice', 'octo-bob');
};

subtest 'a freed login taken by another account' => sub {
    my $alice = 'github-' . $gh->id('octo-alice');
    $gh->rename('octo-alice', 'octo-alice2');
    my $tok = sign_in_as('octo-alice2');
    is(claims($tok->{access_token})->{sub}, $alice, 'octo-alice renamed: still its tenant');
    is_deeply(claims($tok->{access_token})->{repos}, ['acme/app'],
              '... the login rule follows it (bound at its first sign-in)');

    # mallory takes the freed login "octo-alice"
    $gh->set(ids => { %{ $gh->{ids} }, 'octo-alice' => 777_001 });
    $gh->set(login => 'octo-alice');
    my ($r, $p, $page) = to_github(state => 'st-mallory');
    my ($back) = back_from_github($r, $page);
    my $q = SMCP::OAuth::query($back->{headers}{location});
    is($q->{error}, 'access_denied', 'the new holder of "octo-alice": access_denied');
    ok(!$q->{code}, '... no code');

    # and as a member of acme, only what the organization gives
    $gh->set(orgs => { %{ $gh->{orgs} }, 'octo-alice' => ['acme'] });
    $tok = sign_in_as('octo-alice');
    is(claims($tok->{access_token})->{sub}, 'github-777001', '... a member of acme: its own tenant');
    is_deeply(claims($tok->{access_token})->{repos}, [ 'acme/*', 'tools/cli' ],
              '... with the organization\'s repositories, not the login rule\'s');
};

subtest 'an organization renamed, its name taken' => sub {
    my $acme = SMCP::Fakes::GitHubOAuth::_made_id('acme', 9_000_000);
    my %orgs = %{ $gh->{orgs} };
    $orgs{'octo-bob'} = ['acme-old'];
    $orgs{'octo-eve'} = ['acme'];
    $gh->set(orgs => \%orgs, org_ids => { 'acme-old' => $acme, acme => 888_002 });
    my $tok = sign_in_as('octo-bob');
    is_deeply(claims($tok->{access_token})->{repos}, [ 'acme/*', 'tools/cli' ],
              'a member of acme, renamed acme-old: still let in by @acme');
    $gh->set(login => 'octo-eve');
    my ($r, $p, $page) = to_github(state => 'st-eve2');
    my ($back) = back_from_github($r, $page);
    is(SMCP::OAuth::query($back->{headers}{location})->{error}, 'access_denied',
       'a member of the new "acme": access_denied');
    $orgs{'octo-bob'} = ['acme', 'other'];
    delete $orgs{'octo-eve'};
    $gh->set(orgs => \%orgs, org_ids => {});
};

subtest 'id:N' => sub {
    $gh->rename('octo-dave', 'dave-anything');
    my $tok = sign_in_as('dave-anything');
    is(claims($tok->{access_token})->{sub}, "github-$DAVE", 'the user of id:N, whatever its login');
    is_deeply(claims($tok->{access_token})->{repos}, ['acme/ops'], '... its repositories');
};

subtest 'a refresh asks GitHub again' => sub {
    my $tok = sign_in_as('octo-carol');
    my $carol = 'github-' . $gh->id('octo-carol');
    is(claims($tok->{access_token})->{sub}, $carol, 'octo-carol, a member of acme');
    my $n = grep { $_->{path} eq '/user/orgs' } $gh->requests;
    my $r = refresh($tok->{refresh_token});
    is($r->{status}, 200, 'a refresh') or diag($r->{body});
    ok((grep { $_->{path} eq '/user/orgs' } $gh->requests) > $n, '... asked GitHub');
    is(claims($r->{json}{access_token})->{sub}, $carol, '... the same tenant');
    my $rt = $r->{json}{refresh_token};

    $gh->set(fail => 1);
    $r = refresh($rt);
    is($r->{status}, 503, 'GitHub down: 503');
    is($r->{json}{error}, 'temporarily_unavailable', '... temporarily_unavailable');
    $gh->set(fail => 0);
    $r = refresh($rt);
    is($r->{status}, 200, '... the same refresh token works once GitHub is back');
    $rt = $r->{json}{refresh_token};
    my $at = $r->{json}{access_token};

    my %orgs = %{ $gh->{orgs} };
    $orgs{'octo-carol'} = [];
    $gh->set(orgs => \%orgs);
    $r = refresh($rt);
    is($r->{status}, 400, 'removed from acme: the next refresh is refused');
    is($r->{json}{error}, 'invalid_grant', '... invalid_grant');
    like($r->{json}{error_description}, qr/no longer allowed/, '... saying why');
    $orgs{'octo-carol'} = ['acme'];
    $gh->set(orgs => \%orgs);
    is(refresh($rt)->{status}, 400, '... and stays refused (the grant is revoked)');
    my ($sid, $ir) = $t->initialize(token => $at);
    is($ir->{status}, 401, '... its last access token too');
};

# the GitHub token a grant keeps is sealed under the signing key, named
# by its kid: a rotation keeps the grants (the old key still opens them),
# retiring the old key ends those it sealed
subtest 'a rotation of the signing key' => sub {
    my $sealed = sub { [ map { $t->redis('HGET', $_, 'github') // '' }
                         $t->redis_keys('smcp:oauth:family:*') ] };
    my %before = map { $_ => 1 } @{ $sealed->() };
    my $old = sign_in_as('octo-carol');
    my @new = grep { !$before{$_} } @{ $sealed->() };
    is(scalar @new, 1, 'a grant of the bare secret');
    unlike($new[0] // '', qr/:/, '... its GitHub token sealed without a kid');

    my $S2 = 'rotated-' . rhex(32);
    SMCP::Test::_write_file("$t->{dir}/keys", "k2 $S2\nk1 $t->{secret} legacy\n");
    ok($t->reload(undef, conf_opts => { secret_conf => 'sandbox_mcp_keys_file %%DIR%%/keys;' }),
       'rotated: k2 signs, the bare secret is k1, the legacy key');
    my $r = refresh($old->{refresh_token});
    is($r->{status}, 200, 'the old grant refreshes (the legacy key opens its seal)')
        or diag($r->{body});
    is((SMCP::Test::decode_jwt($r->{json}{access_token} // ''))[0]{kid}, 'k2',
       '... its new access token names k2');
    my $old_rt = $r->{json}{refresh_token};

    %before = map { $_ => 1 } @{ $sealed->() };
    my $newer = sign_in_as('octo-carol');
    @new = grep { !$before{$_} } @{ $sealed->() };
    like($new[0] // '', qr/^k2:[\w-]+$/, 'a new grant: sealed under k2, named');
    $r = refresh($newer->{refresh_token});
    is($r->{status}, 200, '... it refreshes') or diag($r->{body});
    my $newer_rt = $r->{json}{refresh_token};

    SMCP::Test::_write_file("$t->{dir}/keys", "k2 $S2\n");
    ok($t->reload, 'k1 retired');
    $r = refresh($old_rt);
    is($r->{status}, 400, "a grant sealed under k1: its refresh is refused");
    is($r->{json}{error}, 'invalid_grant', '... invalid_grant');
    is(refresh($newer_rt)->{status}, 200, "a grant sealed under k2 refreshes");
};

subtest 'no GitHub secret or token in the logs or in Redis' => sub {
    my $log = $t->error_log . $t->read_file("$t->{dir}/access.log");
    unlike($log, qr/gh-secret/, 'not the client secret');
    unlike($log, qr/gho_/, 'not a GitHub token');
    my $redis = join "\n", map { my $k = $_; my $ty = $t->redis('TYPE', $k);
        $ty eq 'hash' ? join(' ', @{ $t->redis('HGETALL', $k) }) : $ty eq 'string'
        ? $t->redis('GET', $k) // '' : '' } $t->redis_keys('*');
    unlike($redis, qr/gho_/, 'Redis holds no GitHub token in the clear');
    like($redis, qr/\bgithub\b/, '... (the grants hold it sealed)');
};

$t->done;
