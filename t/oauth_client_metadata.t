#!/usr/bin/perl

# Client ID metadata documents (MCP authorization, 2025-11-25): a client_id
# that is an https URL is fetched through an internal location (a
# subrequest: the worker never blocks), bounded (8 KiB), checked like a
# registration (it must name itself, https or loopback redirect URIs, a
# public client), cached in Redis for an hour; then the code flow as for a
# registered client.  Refused with a page and no redirect: a document that
# cannot be fetched, is not JSON, names another client_id, another
# redirect_uri, a bad redirect URI, a confidential client, or is too big;
# a URL with a query is no client at all.  The documents come from a fake
# (SMCP::Fakes::start_static); the test's internal location maps the https
# URL onto it.
#
# Needs nginx + the module and redis-server; CI=true turns skips into
# failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(json_encode json_decode);
use SMCP::OAuth;
use SMCP::Fakes qw(start_static);

my $docs = start_static();
my $D = $docs->port;

my $t = SMCP::Test->new(
    workers => 2,
    server  => q{
        sandbox_mcp_oauth on;
        location /.well-known/ { sandbox_mcp_oauth_endpoints; }
        location /oauth/ { sandbox_mcp_oauth_endpoints; }}
        . SMCP::OAuth::client_metadata_conf($D),
);
$t->start;
$t->allow_log(qr/too big subrequest response/);

my $o = SMCP::OAuth->new($t);
my $P = 'smcp:';

sub doc {
    my ($path, %o) = @_;
    my $id = "https://client.example$path";
    $docs->set_file($path, json_encode({ client_id => $id, client_name => 'CIMD client',
        redirect_uris => [ $o->{redirect} ], token_endpoint_auth_method => 'none', %o }));
    return { client_id => $id };
}

sub page_for {
    my ($client, %o) = @_;
    return $o->authorize_page($o->auth_params($client,
        challenge => (SMCP::OAuth::pkce())[1], %o));
}

subtest 'advertised' => sub {
    my $j = json_decode($o->get('/.well-known/oauth-authorization-server')->{body});
    ok($j->{client_id_metadata_document_supported}, 'client_id_metadata_document_supported');
};

subtest 'the code flow with a URL as client_id' => sub {
    my $client = doc('/oauth/client.json');
    my $page = page_for($client);
    is($page->{status}, 200, 'the sign-in page') or diag($page->{body});
    like($page->{body}, qr{<strong>CIMD client</strong>}, "names the document's client");
    my $n = () = $docs->requests;
    ok($n >= 1, 'the document was fetched');
    my $ttl = $t->redis('TTL', "${P}oauth:client:$client->{client_id}");
    ok($ttl > 0 && $ttl <= 3600, "cached for an hour ($ttl s)");
    page_for($client);
    is(scalar(() = $docs->requests), $n, 'the second time from the cache');

    my $key = $t->token(sub => 'carol', repos => ['acme/app']);
    my ($tok) = $o->sign_in($client, key => $key);
    ok($tok->{access_token}, 'tokens for it') or diag(explain($tok));
    my (undef, $claims) = SMCP::Test::decode_jwt($tok->{access_token} // '');
    is($claims->{client_id}, $client->{client_id}, 'client_id = the URL');
    my ($sid) = $t->initialize(token => $tok->{access_token});
    ok($sid, '/mcp accepts the access token');
};

subtest 'refusals' => sub {
    my $refused = sub {
        my ($r, $name, $re) = @_;
        subtest $name => sub {
            is($r->{status}, 400, 'HTTP 400 page');
            ok(!$r->{headers}{location}, 'no redirect');
            like($r->{body}, $re, 'says why') if $re;
        };
    };
    $refused->(page_for({ client_id => 'https://client.example/none.json' }),
               'a document that is not there', qr/could not be fetched/);
    $docs->set_file('/text.json', 'not json');
    $refused->(page_for({ client_id => 'https://client.example/text.json' }),
               'not JSON', qr/not JSON/);
    doc('/other.json', client_id => 'https://evil.example/other.json');
    $refused->(page_for({ client_id => 'https://client.example/other.json' }),
               'a document naming another client_id', qr/another client_id/);
    doc('/bad-uri.json', redirect_uris => [ 'http://evil.example/cb' ]);
    $refused->(page_for({ client_id => 'https://client.example/bad-uri.json' }),
               'a redirect URI neither https nor loopback', qr/redirect URI/);
    doc('/secret.json', token_endpoint_auth_method => 'private_key_jwt');
    $refused->(page_for({ client_id => 'https://client.example/secret.json' }),
               'a confidential client', qr/public/);
    # a document that overflows the subrequest's buffer (8k): refused with
    # a page like any document that cannot be fetched, nothing cached, the
    # worker serves on
    doc('/big.json', client_name => 'x' x 100, padding => 'p' x 9000);
    $refused->(page_for({ client_id => 'https://client.example/big.json' }),
               'a document over 8 KiB', qr/could not be fetched/);
    is($o->get('/.well-known/oauth-protected-resource')->{status}, 200,
       '... and nginx serves on');
    my $c = doc('/mine.json');
    $refused->(page_for($c, redirect_uri => 'http://127.0.0.1:9/elsewhere'),
               'a redirect_uri the document does not list', qr/invalid_redirect_uri/);
    $refused->(page_for({ client_id => 'https://client.example/mine.json?x=1' }),
               'a URL with a query', qr/invalid_client/);
    $refused->(page_for({ client_id => 'https://client.example/' }),
               'a URL without a path', qr/invalid_client/);
    $refused->(page_for({ client_id => 'http://client.example/mine.json' }),
               'an http URL', qr/invalid_client/);
    ok(!grep({ /\?|elsewhere/ } map { $_->{target} } $docs->requests),
       'nothing odd was fetched');
    is(scalar(grep { /oauth:client:https/ } $t->redis_keys("${P}oauth:client:*")), 2,
       'only the good documents cached');
};

$t->done;
