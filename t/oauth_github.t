#!/usr/bin/perl

# "Sign in with GitHub" on the module's sign-in page, against a scripted
# fake GitHub OAuth server (SMCP::Fakes::start_github_oauth) reached only
# through internal locations (subrequests: the worker never blocks):
# the pending request bound to the browser, the code exchange, the user
# and organization lookups, allowed logins and @organizations with their
# repositories, the GitHub login as tenant; refusals: a login not allowed,
# the user denying at GitHub, another browser's callback, a callback used
# twice or made up; no GitHub token or client secret in the logs.
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

my $gh = start_github_oauth(orgs => { 'octo-bob' => ['acme', 'other'] });
my $G = $gh->url;

my $t = SMCP::Test->new(
    workers => 2,
    server  => qq{
        sandbox_mcp_oauth on;
        sandbox_mcp_oauth_github gh-client file:%%DIR%%/gh-secret;
        sandbox_mcp_oauth_github_authorize_url $G/login/oauth/authorize;
        sandbox_mcp_oauth_github_allow octo-alice acme/app;
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
    is($claims->{sub}, 'octo-alice', 'the tenant is the GitHub login');
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
    is($claims->{sub}, 'octo-bob', 'tenant octo-bob');
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

subtest 'no GitHub secret or token in the logs' => sub {
    my $log = $t->error_log . $t->read_file("$t->{dir}/access.log");
    unlike($log, qr/gh-secret/, 'not the client secret');
    unlike($log, qr/gho_/, 'not a GitHub token');
};

$t->done;
