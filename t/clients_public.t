#!/usr/bin/perl

# A public address from `make up` (docs/clients.md, "A public address"):
# the doc's settings (SMCP_PUBLIC_URL, SMCP_TLS_CERT and SMCP_TLS_KEY with
# a certificate this test makes with openssl, SMCP_OAUTH=on) given to
# .ci/stack up (SMCP::MakeUp, egress off: no Docker), then:
#
#   - the MCP listener speaks https with that certificate, and only https;
#   - /mcp's 401 names the protected-resource metadata at the https
#     public URL, and discovery names it as the issuer;
#   - Claude Desktop's OAuth configuration of the doc (mcp-remote given
#     the URL alone), started as Claude Desktop starts it and spoken to
#     over stdio (t/js/stdio_client.mjs): mcp-remote discovers, registers
#     and opens the browser, a headless Chromium that signs in with an
#     access key (t/js/signin.mjs, through xdg-open's BROWSER), then
#     initialize, tools/list and tools/call go through with the access
#     token; started again, it reuses its tokens without the browser;
#   - the public URL's host is an allowed Host, another name is not.
#
# Needs nginx + the module, redis-server, openssl, curl, Node 22, npx,
# the clients from `npm ci`, playwright-core and Chromium; CI=true turns
# skips into failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use File::Temp qw(tempdir);
use SMCP::Test qw(repo_root require_prereqs browser_missing chromium_bin json_decode
                  json_encode run_cmd spew slurp test_cert js_report which_bin node22_bin
                  wait_until);
use SMCP::Clients qw(snippet localize desktop_entry);
use SMCP::MakeUp;

my $root = repo_root();
require_prereqs(browser_missing(), SMCP::Clients::missing(),
                (map { which_bin($_) ? () : "$_ (make deps)" } qw(openssl curl redis-server)),
                -f "$root/build/ngx_http_sandbox_mcp_module.so" ? () : 'the module (make)');

my $c = SMCP::Clients->new;
my $dir = tempdir('smcp-public-XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{SMCP_TEST_KEEP});

# the certificate: a CA of the test's, localhost signed by it; the key
# readable by its owner alone
my ($crt, $key) = eval { test_cert($dir, 'mcp', 'DNS:localhost', 'IP:127.0.0.1',
                                   'DNS:mcp.smcp.test', 'DNS:evil.smcp.test') };
ok($crt, 'a test CA and a certificate for localhost (openssl)') or SMCP::Test::give_up($@);
my $ca = "$dir/ca.crt";
chmod 0600, $key;

my $up = SMCP::MakeUp->new(egress => 0);
my $port = $up->port;
my $public = "https://localhost:$port";

# the doc's settings, each given this test's value (SMCP_LISTEN: the
# harness's loopback port; SMCP_OAUTH: the doc's)
my $recipe = snippet('make-up-public');
my %doc = $recipe =~ /\b(SMCP_[A-Z_]+)=(\S+)/g;
is_deeply([ sort keys %doc ], [ qw(SMCP_LISTEN SMCP_OAUTH SMCP_PUBLIC_URL SMCP_TLS_CERT SMCP_TLS_KEY) ],
          'the doc\'s recipe: five settings');
like($recipe, qr/\bmake up\s*$/, '... for make up');
my %mine = (SMCP_LISTEN => "127.0.0.1:$port", SMCP_PUBLIC_URL => $public,
            SMCP_TLS_CERT => $crt, SMCP_TLS_KEY => $key, SMCP_OAUTH => $doc{SMCP_OAUTH});
$ENV{$_} = $mine{$_} for keys %mine;

# settings make up refuses, before it starts anything
for my $bad (
    [ { SMCP_TLS_KEY => undef }, qr/SMCP_TLS_CERT and SMCP_TLS_KEY: set both/, 'a certificate without its key' ],
    [ { SMCP_TLS_CERT => "$dir/none.crt" }, qr/SMCP_TLS_CERT=\S+: not a readable file/, 'a missing certificate' ],
    [ { SMCP_OAUTH => 'maybe' }, qr/SMCP_OAUTH=maybe: on or off/, 'SMCP_OAUTH=maybe' ],
    [ { SMCP_PUBLIC_URL => "$public; return 200 x;" }, qr/want http\(s\):\/\/host\[:port\]/,
      'a public URL with more than a scheme, a host and a port' ],
) {
    my ($set, $re, $name) = @$bad;
    local @ENV{ keys %$set } = values %$set;
    delete local @ENV{ grep { !defined $set->{$_} } keys %$set };
    my ($rc, $out) = $up->up;
    ok($rc != 0 && $out =~ $re, "make up refuses $name") or diag($out);
    ok(!-e $up->state . '/nginx.pid' && !-e $up->state . '/redis.pid', '... and starts nothing');
}

my ($rc, $out) = $up->up;
is($rc, 0, 'make up with TLS, a public URL and OAuth') or diag($out);

# curl(args...) -> (exit code, output): against the stack, the CA trusted
sub curl {
    my ($code, $o, $e) = run_cmd(['curl', '-sS', '--max-time', '10', '--cacert', $ca, @_],
                                 timeout => 30);
    return ($code, "$o$e");
}

subtest 'https with the certificate, and only https' => sub {
    my ($code, $body) = curl("$public/healthz");
    is($code, 0, 'https://localhost/healthz: the certificate verifies') or diag($body);
    like($body, qr/"status"/, '... and the server answers');
    ($code, $body) = curl('-o', '/dev/null', '-w', '%{http_code}', "http://127.0.0.1:$port/healthz");
    is($body, '400', 'plain http on the listener: refused (400)');
    my $conf = slurp($up->state . '/nginx.conf');
    like($conf, qr/listen 127\.0\.0\.1:$port ssl;/, 'nginx.conf: listen ... ssl');
    unlike($conf, qr/BEGIN .*PRIVATE KEY/, '... naming the key file, not holding the key');
};

subtest 'make up again (a reload, as after a renewal): still https' => sub {
    my ($rc, $out) = $up->up;
    is($rc, 0, 'make up again') or diag($out);
    my ($code, $body) = curl("$public/healthz");
    is($code, 0, 'https://localhost/healthz: the certificate verifies') or diag($body);
};

subtest 'OAuth on: discovery at the public URL' => sub {
    my ($code, $hdrs) = curl('-D', '-', '-o', '/dev/null', '-X', 'POST',
                             '-H', 'Content-Type: application/json',
                             '-H', 'Accept: application/json, text/event-stream',
                             '--data', '{"jsonrpc":"2.0","id":1,"method":"ping"}', "$public/mcp");
    like($hdrs, qr/^HTTP\/\S+ 401/m, '/mcp without a token: 401');
    like($hdrs, qr/^www-authenticate: Bearer .*resource_metadata="\Q$public\E\/\.well-known\/oauth-protected-resource\/mcp"/mi,
         '... naming the resource metadata at the public https URL');
    my $meta;
    ($code, $meta) = curl("$public/.well-known/oauth-authorization-server");
    my $m = json_decode($meta) // {};
    is($m->{issuer}, $public, 'the issuer: SMCP_PUBLIC_URL');
    is($m->{authorization_endpoint}, "$public/oauth/authorize", 'the authorization endpoint');
};

# the access key a person pastes: a tenant token signed with make up's
# secret, as `make token` makes it
my $akey = `$root/build/smcp-token --sub alice --repos 'acme/*' --secret-file ${\ $up->state}/secret 2>/dev/null`;
chomp $akey;

# Claude Desktop's entry with the URL alone, and the browser it opens
my $json = localize(snippet('claude-desktop-oauth'), $public);
my $entry = desktop_entry($json);
ok($entry && $entry->{command} && !grep({ /--header/ } @{ $entry->{args} || [] }),
   'the doc\'s OAuth entry: a stdio server, the URL alone') or diag($json);
my $checks = "$dir/signin.jsonl";
my $opener = "$dir/browser";
# (its check lines to a file: the stdio client's are on its stdout)
spew($opener, "#!/bin/sh\nSMCP_CHECKS_FILE='$checks' exec '" . node22_bin()
              . "' '$root/t/js/signin.mjs' \"\$1\"\n");
chmod 0755, $opener;
my %env = (NODE_EXTRA_CA_CERTS => $ca, BROWSER => $opener, SMCP_ACCESS_KEY => $akey,
           SMCP_CHROMIUM => chromium_bin());
my @stdio = ('initialize over stdio', 'tools/list: the nine tools', 'tools/call opencode_list_runs');

subtest 'mcp-remote, the URL alone: sign-in in the browser, then the tools' => sub {
    $c->js_checks('mcp-remote (oauth)',
                  [ "$root/t/js/stdio_client.mjs", json_encode($entry), 'opencode_list_runs' ],
                  \@stdio, env => \%env, timeout => 240);
    # the browser closes after the client has what it needs
    wait_until(60, sub { slurp($checks) =~ /"done":true/ }, 0.2);
    my ($got, $done) = js_report('the browser', slurp($checks), [
        'the client opened the authorization page with PKCE S256',
        'the sign-in page names the client and its callback',
        'the access key signs in; the browser goes back to the client',
        'the page made no script error',
    ]);
    ok($done, 'the browser ran to its end');
};

subtest 'mcp-remote started again: its tokens, no browser' => sub {
    unlink $checks;
    $c->js_checks('mcp-remote (oauth, again)',
                  [ "$root/t/js/stdio_client.mjs", json_encode($entry), 'opencode_list_runs' ],
                  \@stdio, env => \%env, timeout => 120);
    ok(!-e $checks, 'no browser opened');
};

# a public name of its own: allowed as Host without SMCP_ALLOWED_HOSTS
subtest 'the public URL\'s host is allowed, no other' => sub {
    local $ENV{SMCP_PUBLIC_URL} = "https://mcp.smcp.test:$port";
    my ($rc, $out) = $up->up;
    is($rc, 0, 'make up with SMCP_PUBLIC_URL=https://mcp.smcp.test:PORT') or diag($out);
    my $init = json_encode({ jsonrpc => '2.0', id => 1, method => 'initialize',
        params => { protocolVersion => '2025-06-18', capabilities => {},
                    clientInfo => { name => 'curl', version => '1' } } });
    my $status = sub {
        my ($host) = @_;
        my (undef, $code) = curl('-o', '/dev/null', '-w', '%{http_code}',
            '--resolve', "$host:$port:127.0.0.1", '-X', 'POST',
            '-H', "Authorization: Bearer $akey", '-H', 'Content-Type: application/json',
            '-H', 'Accept: application/json, text/event-stream', '--data', $init,
            "https://$host:$port/mcp");
        return $code;
    };
    # make up reloads nginx: the new workers answer once they are up
    my $got;
    wait_until(30, sub { ($got = $status->('mcp.smcp.test')) eq '200' }, 0.2);
    is($got, '200', 'initialize at https://mcp.smcp.test: 200');
    is($status->('evil.smcp.test'), '403', 'initialize at https://evil.smcp.test: 403');
};

($rc, $out) = $up->down;
is($rc, 0, 'make down') or diag($out);

done_testing();
