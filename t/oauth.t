#!/usr/bin/perl

# The module's OAuth 2.1 authorization server (docs/contracts.md "OAuth
# 2.1"), against real nginx + redis-server:
#   discovery   /mcp's 401 names the protected-resource metadata; RFC 9728
#               and RFC 8414 documents (and the OpenID path)
#   register    RFC 7591 public clients; hostile metadata refused, nothing
#               stored
#   code flow   sign-in page (consent line, CSRF cookie + form token),
#               access key, code, PKCE, access token accepted by /mcp;
#               refresh rotation; revocation (RFC 7009)
#   refusals    each with its OAuth error: wrong PKCE verifier, reused code
#               (its tokens revoked), expired code, redirect_uri mismatch,
#               unregistered client, resource of another server, missing
#               state, forged consent POSTs, reused refresh token (family
#               revoked, its access token refused), access token of another
#               audience; no redirect to an unregistered URI
#   bearer      today's tokens still work unchanged
#   compose     the nginx image's entrypoint with SMCP_OAUTH=on renders a
#               configuration nginx accepts (and refuses another value)
#
# Needs nginx + the module and redis-server; CI=true turns skips into
# failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Digest::SHA qw(sha256_hex);
use SMCP::Test qw(json_decode b64url rhex pong_ok repo_root run_cmd module_path);
use SMCP::OAuth;

my $t = SMCP::Test->new(
    workers => 2,
    server  => q{
        sandbox_mcp_oauth on;
        location /.well-known/ { sandbox_mcp_oauth_endpoints; }
        location /oauth/ { sandbox_mcp_oauth_endpoints; }
        location /other/mcp {
            sandbox_mcp;
            sandbox_mcp_oauth_resource https://other.example/mcp;
        }},
);
$t->start;

my $o = SMCP::OAuth->new($t);
my $P = 'smcp:';
my $port = $t->port;
my $issuer = $o->issuer;
my $resource = $o->resource;
my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };

sub oauth_error {
    my ($r, $status, $error, $name) = @_;
    subtest $name => sub {
        is($r->{status}, $status, "HTTP $status");
        is(ref $r->{json} eq 'HASH' ? $r->{json}{error} : undef, $error,
           "error $error") or diag($r->{body});
        like($r->{json}{error_description} // '', qr/\S/, 'a description');
        is($r->{headers}{'cache-control'}, 'no-store', 'no-store');
    };
}

sub redirect_error {
    my ($r, $error, $name, %o) = @_;
    subtest $name => sub {
        is($r->{status}, 302, '302 to the client');
        my $loc = $r->{headers}{location} // '';
        like($loc, qr{^\Q$o->{redirect}\E\?}, 'to its registered redirect_uri');
        my $q = SMCP::OAuth::query($loc);
        is($q->{error}, $error, "error=$error");
        ok(!exists $q->{code}, 'no code');
        is($q->{iss}, $issuer, 'iss');
        is($q->{state}, $o{state}, 'state returned') if exists $o{state};
    };
}

sub codes { return scalar grep { /oauth:code:/ } $t->redis_keys("${P}oauth:*") }

###############################################################################
# discovery

subtest 'discovery' => sub {
    my $r = $t->mcp_post($ping, token => undef);
    is($r->{status}, 401, '/mcp without a token: 401');
    like($r->{headers}{'www-authenticate'},
         qr{^Bearer realm="sandbox-mcp", resource_metadata="\Q$issuer\E/\.well-known/oauth-protected-resource/mcp"$},
         'WWW-Authenticate names the resource metadata');
    $r = $t->mcp_post($ping, token => 'x.y.z');
    like($r->{headers}{'www-authenticate'},
         qr{resource_metadata="[^"]+", error="invalid_token"}, 'also with a bad token');

    for my $path ('/.well-known/oauth-protected-resource',
                  '/.well-known/oauth-protected-resource/mcp') {
        $r = $o->get($path);
        is($r->{status}, 200, "GET $path");
        my $j = json_decode($r->{body});
        is($j->{resource}, $resource, 'resource = the MCP URL');
        is_deeply($j->{authorization_servers}, [$issuer], 'authorization_servers');
        is_deeply($j->{scopes_supported}, ['mcp'], 'scopes_supported');
        is($r->{headers}{'access-control-allow-origin'}, '*', 'CORS');
    }
    for my $path ('/.well-known/oauth-authorization-server',
                  '/.well-known/openid-configuration') {
        $r = $o->get($path);
        is($r->{status}, 200, "GET $path");
        my $j = json_decode($r->{body});
        is($j->{issuer}, $issuer, 'issuer');
        is($j->{authorization_endpoint}, "$issuer/oauth/authorize", 'authorize');
        is($j->{token_endpoint}, "$issuer/oauth/token", 'token');
        is($j->{registration_endpoint}, "$issuer/oauth/register", 'register');
        is($j->{revocation_endpoint}, "$issuer/oauth/revoke", 'revoke');
        is_deeply($j->{code_challenge_methods_supported}, ['S256'], 'S256 only');
        is_deeply($j->{token_endpoint_auth_methods_supported}, ['none'], 'public');
        is_deeply($j->{grant_types_supported},
                  ['authorization_code', 'refresh_token'], 'grant types');
    }
    is($o->get('/.well-known/oauth-protected-resource/other')->{status}, 404,
       'another resource path: 404');
    is($o->get('/oauth/nothing')->{status}, 404, 'unknown route: 404');
    $r = $t->http(method => 'OPTIONS', path => '/oauth/token',
                  headers => [ Origin => 'https://claude.ai',
                               'Access-Control-Request-Method' => 'POST' ]);
    is($r->{status}, 204, 'CORS preflight of the token endpoint');
    is($o->get('/oauth/token')->{status}, 405, 'GET /oauth/token: 405');
    is($t->http(path => '/.well-known/oauth-authorization-server',
                host => 'evil.example')->{status}, 403, 'a foreign Host: 403');
    $r = $o->get('/oauth/signin.css');
    is($r->{status}, 200, 'the style sheet');
    like($r->{headers}{'content-type'}, qr{^text/css}, 'as text/css');
};

###############################################################################
# registration

subtest 'registration' => sub {
    my ($c, $r) = $o->register(client_name => 'Claude <test>',
                               redirect_uris => [ 'https://claude.ai/api/mcp/auth_callback',
                                                  $o->{redirect} ]);
    is($r->{status}, 201, '201 Created');
    like($c->{client_id}, qr/^mcp_[0-9a-f]{32}$/, 'client_id');
    is($c->{token_endpoint_auth_method}, 'none', 'a public client');
    is_deeply($c->{redirect_uris}, [ 'https://claude.ai/api/mcp/auth_callback',
                                     $o->{redirect} ], 'redirect_uris');
    my $h = $t->redis_hgetall("${P}oauth:client:$c->{client_id}");
    is($h->{name}, 'Claude <test>', 'stored');
    my $ttl = $t->redis('TTL', "${P}oauth:client:$c->{client_id}");
    ok($ttl > 0 && $ttl <= 30 * 86400, "with an expiry ($ttl s)");

    $c = $o->register(token_endpoint_auth_method => 'client_secret_basic');
    is($c->{token_endpoint_auth_method}, 'none', 'asked for a secret: none');

    my $before = scalar $t->redis_keys("${P}oauth:client:*");
    for my $case (
        [ 'no redirect_uris',   { redirect_uris => undef }, 'invalid_redirect_uri' ],
        [ 'empty list',         { redirect_uris => [] }, 'invalid_redirect_uri' ],
        [ 'plain http',         { redirect_uris => ['http://evil.example/cb'] }, 'invalid_redirect_uri' ],
        [ 'custom scheme',      { redirect_uris => ['javascript:alert(1)'] }, 'invalid_redirect_uri' ],
        [ 'a fragment',         { redirect_uris => ['https://a.example/cb#x'] }, 'invalid_redirect_uri' ],
        [ 'userinfo',           { redirect_uris => ['https://a.example@evil.example/cb'] }, 'invalid_redirect_uri' ],
        [ 'a space',            { redirect_uris => ['https://a.example/c b'] }, 'invalid_redirect_uri' ],
        [ 'a quote (RFC 3986)', { redirect_uris => ['https://a.example/c"b'] }, 'invalid_redirect_uri' ],
        [ 'a brace (RFC 3986)', { redirect_uris => ['https://a.example/{cb}'] }, 'invalid_redirect_uri' ],
        [ 'too long',           { redirect_uris => ['https://a.example/' . 'a' x 600] }, 'invalid_redirect_uri' ],
        [ 'too many',           { redirect_uris => [ map { "https://a.example/$_" } 1 .. 9 ] }, 'invalid_redirect_uri' ],
        [ 'not strings',        { redirect_uris => [ { a => 1 } ] }, 'invalid_redirect_uri' ],
        [ 'a long name',        { client_name => 'n' x 129 }, 'invalid_client_metadata' ],
        [ 'a control char',     { client_name => "a\x01b" }, 'invalid_client_metadata' ],
        [ 'a bad grant type',   { grant_types => ['password'] }, 'invalid_client_metadata' ],
        [ 'a bad response type', { response_types => ['token'] }, 'invalid_client_metadata' ],
    ) {
        my %md = %{ $case->[1] };
        my $r = $o->post('/oauth/register', {
            client_name => 'x', redirect_uris => [ $o->{redirect} ], %md });
        oauth_error($r, 400, $case->[2], "refused: $case->[0]");
    }
    my $r2 = $o->post('/oauth/register', 'not json');
    oauth_error($r2, 400, 'invalid_client_metadata', 'refused: not JSON');
    $r2 = $o->post('/oauth/register', '{"redirect_uris":["http://127.0.0.1/a"],'
                                    . '"redirect_uris":["http://127.0.0.1/b"]}');
    oauth_error($r2, 400, 'invalid_client_metadata', 'refused: duplicate keys');
    $r2 = $o->post('/oauth/register', { redirect_uris => [ $o->{redirect} ],
                                        x => 'y' x 20000 });
    is($r2->{status}, 413, 'a body over 16 KiB: 413');
    is(scalar $t->redis_keys("${P}oauth:client:*"), $before, 'nothing stored');

    for my $ok ('http://localhost:33418/cb', 'http://[::1]/cb', 'http://127.0.0.1/cb?x=1') {
        my ($c2, $r3) = $o->register(redirect_uris => [$ok]);
        is($r3->{status}, 201, "loopback $ok accepted");
    }
};

###############################################################################
# the code flow

my $client = $o->register;
my $key = $t->token(sub => 'alice', repos => [ 'acme/app', 'acme/*' ],
                    jti => 'key-' . rhex(8));
my ($tokens, $code, $verifier);

subtest 'sign-in page' => sub {
    my ($v, $c) = SMCP::OAuth::pkce();
    my @p = $o->auth_params($client, challenge => $c);
    my $page = $o->authorize_page(@p);
    is($page->{status}, 200, 'HTTP 200');
    like($page->{headers}{'content-type'}, qr{^text/html}, 'HTML');
    like($page->{body}, qr{<strong>Test client</strong>}, 'the consent line names the client');
    like($page->{body}, qr{returning to <strong>127\.0\.0\.1:9</strong>}, '... and where it returns');
    like($page->{body}, qr{type="password"[^>]*name="access_key"}, 'an access-key field');
    ok($page->{cookie}, 'a CSRF cookie') or diag(explain($page->{header_list}));
    like($page->{csrf} // '', qr/^\d+\.[A-Za-z0-9_-]{43}$/, 'a form token');
    like($page->{headers}{'content-security-policy'} // '', qr/frame-ancestors 'none'/, 'CSP');
    is($page->{headers}{'x-frame-options'}, 'DENY', 'no framing');
    like($page->{body}, qr{class="github off"}, 'no GitHub button when not configured');

    my $cr = $o->register(client_name => '<script>alert(1)</script>');
    $page = $o->authorize_page($o->auth_params($cr, challenge => $c));
    unlike($page->{body}, qr{<script>}, 'the client name is escaped');
    like($page->{body}, qr{&lt;script&gt;}, '... shown as text');
};

subtest 'code flow with an access key' => sub {
    my ($v, $c) = SMCP::OAuth::pkce();
    my @p = $o->auth_params($client, challenge => $c, state => 'xyz 1/2');
    my $page = $o->authorize_page(@p);
    my $r = $o->consent($page, \@p, key => $key);
    is($r->{status}, 302, 'consent: 302') or diag($r->{body});
    my $q = SMCP::OAuth::query($r->{headers}{location});
    like($r->{headers}{location}, qr{^\Q$o->{redirect}\E\?code=}, 'to the redirect_uri');
    is($q->{state}, 'xyz 1/2', 'state returned');
    is($q->{iss}, $issuer, 'iss returned');
    like($q->{code}, qr/^ac_[0-9a-f]{64}$/, 'a code');
    is($r->{headers}{'cache-control'}, 'no-store', 'the redirect is not cached');
    ok($t->redis('EXISTS', "${P}oauth:code:" . sha256_hex($q->{code})),
       'stored under its hash');
    ok(!$t->redis('EXISTS', "${P}oauth:code:$q->{code}"), 'not in clear');

    $r = $o->token(grant_type => 'authorization_code', code => $q->{code},
                   redirect_uri => $o->{redirect}, client_id => $client->{client_id},
                   code_verifier => $v, resource => $resource);
    is($r->{status}, 200, 'token: 200') or diag($r->{body});
    $tokens = $r->{json};
    ($code, $verifier) = ($q->{code}, $v);
    is($tokens->{token_type}, 'Bearer', 'Bearer');
    ok($tokens->{expires_in} > 3500 && $tokens->{expires_in} <= 3600, 'expires in 1 h');
    like($tokens->{refresh_token}, qr/^rt_[0-9a-f]{24}_[0-9a-f]{64}$/, 'a refresh token');
    is($r->{headers}{'cache-control'}, 'no-store', 'no-store');
    my (undef, $claims) = SMCP::Test::decode_jwt($tokens->{access_token});
    is($claims->{aud}, $resource, 'aud = the MCP URL');
    is($claims->{scope}, 'mcp', 'scope mcp');
    is($claims->{sub}, 'alice', 'sub = the key\'s tenant');
    is_deeply($claims->{repos}, [ 'acme/app', 'acme/*' ], 'the key\'s grant');
    is($claims->{client_id}, $client->{client_id}, 'client_id');
    like($claims->{jti}, qr/^[0-9a-f]{32}$/, 'a jti');

    my ($sid, $ir) = $t->initialize(token => $tokens->{access_token});
    ok($sid, '/mcp accepts the access token') or diag($ir->{body});
    pong_ok($t->rpc($sid, 'ping', undef, token => $tokens->{access_token}),
            'ping with it');
    my $run = $t->call_tool($sid, 'opencode_list_runs', {},
                            token => $tokens->{access_token});
    ok(!$run->{isError}, 'a tool call with it') or diag(explain($run));

    my $fam = (grep { /oauth:family:/ } $t->redis_keys("${P}oauth:*"))[0];
    my $f = $t->redis_hgetall($fam);
    isnt($f->{current}, $tokens->{refresh_token}, 'the refresh token is stored hashed');
    is($f->{current}, sha256_hex($tokens->{refresh_token}), '... as its SHA-256');
};

# OAuth 2.1 makes state optional when PKCE carries the CSRF protection
# (the SDK's provider sends none unless it defines state()): the flow
# goes on, and no state comes back
subtest 'code flow without state (PKCE S256)' => sub {
    my ($v, $c) = SMCP::OAuth::pkce();
    my @p = $o->auth_params($client, challenge => $c, state => undef);
    my $page = $o->authorize_page(@p);
    is($page->{status}, 200, 'the sign-in page') or diag($page->{body});
    like($page->{body}, qr/name="state" value=""/, '... with an empty state');
    my $r = $o->consent($page, \@p, key => $key);
    is($r->{status}, 302, 'consent: 302') or diag($r->{body});
    my $loc = $r->{headers}{location} // '';
    like($loc, qr{^\Q$o->{redirect}\E\?code=ac_[0-9a-f]{64}&iss=}, 'a code, then iss');
    my $q = SMCP::OAuth::query($loc);
    ok(!exists $q->{state}, 'no state in the redirect');
    $r = $o->token(grant_type => 'authorization_code', code => $q->{code},
                   redirect_uri => $o->{redirect}, client_id => $client->{client_id},
                   code_verifier => $v, resource => $resource);
    is($r->{status}, 200, 'the code exchanged') or diag($r->{body});
};

subtest 'refresh rotation' => sub {
    my $r = $o->token(grant_type => 'refresh_token', refresh_token => $tokens->{refresh_token},
                      client_id => $client->{client_id});
    is($r->{status}, 200, 'refresh: 200') or diag($r->{body});
    my $new = $r->{json};
    isnt($new->{refresh_token}, $tokens->{refresh_token}, 'rotated');
    isnt($new->{access_token}, $tokens->{access_token}, 'a new access token');
    my ($sid) = $t->initialize(token => $new->{access_token});
    ok($sid, 'the new access token works');

    # the spent one again: the family is revoked, its access token too
    $r = $o->token(grant_type => 'refresh_token', refresh_token => $tokens->{refresh_token},
                   client_id => $client->{client_id});
    oauth_error($r, 400, 'invalid_grant', 'reused refresh token: invalid_grant');
    like($r->{json}{error_description}, qr/revoked/, 'says the grant is revoked');
    $r = $o->token(grant_type => 'refresh_token', refresh_token => $new->{refresh_token},
                   client_id => $client->{client_id});
    oauth_error($r, 400, 'invalid_grant', 'the live one of the family is dead too');
    ok(SMCP::Test::wait_until(30, sub {
        $t->mcp_post($ping, session => $sid, token => $new->{access_token})->{status} == 401 }),
       'the family\'s last access token is refused by /mcp');
};

###############################################################################
# refusals

sub fresh_code {
    my (%o) = @_;
    my ($v, $c) = SMCP::OAuth::pkce();
    my @p = $o->auth_params($o{client} // $client, challenge => $c);
    my $page = $o->authorize_page(@p);
    my $r = $o->consent($page, \@p, key => $o{key} // $key);
    return (SMCP::OAuth::query($r->{headers}{location})->{code}, $v);
}

sub redeem {
    my ($code, $v, %x) = @_;
    my %f = (grant_type => 'authorization_code', code => $code,
             redirect_uri => $o->{redirect}, client_id => $client->{client_id},
             code_verifier => $v, %x);
    return $o->token(map { $_ => $f{$_} } sort keys %f);
}

subtest 'token endpoint refusals' => sub {
    my ($c, $v) = fresh_code();
    my (undef, $other) = SMCP::OAuth::pkce();
    oauth_error(redeem($c, 'x' . substr($other, 1) . 'abcdefgh'), 400, 'invalid_grant',
                'wrong PKCE verifier');
    oauth_error(redeem($c, $v), 400, 'invalid_grant',
                'the right verifier after a wrong one: the code is spent');

    ($c, $v) = fresh_code();
    my $r = redeem($c, $v);
    is($r->{status}, 200, 'a code redeemed once');
    my $at = $r->{json}{access_token};
    my ($sid) = $t->initialize(token => $at);
    ok($sid, 'its access token works');
    $r = redeem($c, $v);
    oauth_error($r, 400, 'invalid_grant', 'reused code');
    like($r->{json}{error_description}, qr/already used/, 'says so');
    ok(SMCP::Test::wait_until(30, sub {
        $t->mcp_post($ping, session => $sid, token => $at)->{status} == 401 }),
       'the tokens issued with the reused code are revoked');

    ($c, $v) = fresh_code();
    my $ck = "${P}oauth:code:" . sha256_hex($c);
    $t->redis('HSET', $ck, 'exp', time() - 1);
    $r = redeem($c, $v);
    oauth_error($r, 400, 'invalid_grant', 'expired code');
    like($r->{json}{error_description}, qr/expired/, 'says so');
    my $ttl = $t->redis('TTL', $ck);
    ok($ttl > 0 && $ttl <= 60, "codes live 60 s in Redis ($ttl)");

    ($c, $v) = fresh_code();
    oauth_error(redeem($c, $v, redirect_uri => 'http://127.0.0.1:9/other'), 400,
                'invalid_grant', 'redirect_uri differs from the authorization request');
    ($c, $v) = fresh_code();
    my $c2 = $o->register;
    oauth_error(redeem($c, $v, client_id => $c2->{client_id}), 400, 'invalid_grant',
                'a code of another client');
    ($c, $v) = fresh_code();
    oauth_error(redeem($c, $v, resource => 'https://other.example/mcp'), 400,
                'invalid_target', 'a resource for another server');
    oauth_error(redeem('ac_' . '0' x 64, $v), 400, 'invalid_grant', 'an unknown code');
    oauth_error(redeem($c, 'short'), 400, 'invalid_request', 'a malformed verifier');
    oauth_error($o->token(grant_type => 'password', client_id => $client->{client_id}),
                400, 'unsupported_grant_type', 'grant_type password');
    oauth_error($o->token(grant_type => 'authorization_code', code => $c), 401,
                'invalid_client', 'no client_id');
    oauth_error($o->post('/oauth/token', 'grant_type=refresh_token&grant_type=password&client_id=x'),
                400, 'invalid_request', 'a parameter twice');
    oauth_error($o->token(grant_type => 'refresh_token', client_id => $client->{client_id},
                          refresh_token => 'rt_' . '0' x 24 . '_' . '0' x 64),
                400, 'invalid_grant', 'an unknown refresh token');
};

subtest 'authorization request refusals' => sub {
    my (undef, $c) = SMCP::OAuth::pkce();
    my $n = codes();

    # never a redirect to a URI the client did not register
    my $r = $o->get('/oauth/authorize?' . SMCP::OAuth::form(
        $o->auth_params($client, challenge => $c, redirect_uri => 'https://evil.example/cb')));
    is($r->{status}, 400, 'an unregistered redirect_uri: 400 page');
    ok(!$r->{headers}{location}, '... no redirect');
    like($r->{body}, qr/invalid_redirect_uri/, '... names the error');
    $r = $o->get('/oauth/authorize?' . SMCP::OAuth::form(
        $o->auth_params({ client_id => 'mcp_' . '0' x 32 }, challenge => $c)));
    is($r->{status}, 400, 'an unregistered client: 400 page');
    ok(!$r->{headers}{location}, '... no redirect');
    like($r->{body}, qr/invalid_client/, '... names the error');
    $r = $o->get('/oauth/authorize?client_id=nope&redirect_uri=' . SMCP::OAuth::esc($o->{redirect}));
    is($r->{status}, 400, 'a malformed client_id: 400 page');
    $r = $o->get('/oauth/authorize?client_id=a&client_id=b');
    is($r->{status}, 400, 'a parameter twice: 400 page');

    redirect_error($o->get('/oauth/authorize?' . SMCP::OAuth::form(
        $o->auth_params($client, challenge => $c, state => 'x' x 513))),
        'invalid_request', 'a state over 512 bytes', state => undef);
    redirect_error($o->get('/oauth/authorize?' . SMCP::OAuth::form(
        $o->auth_params($client, challenge => undef, state => undef))),
        'invalid_request', 'no state and no PKCE', state => undef);
    redirect_error($o->get('/oauth/authorize?' . SMCP::OAuth::form(
        $o->auth_params($client, challenge => $c, resource => 'https://other.example/mcp', state => 's1'))),
        'invalid_target', 'a resource for another server', state => 's1');
    redirect_error($o->get('/oauth/authorize?' . SMCP::OAuth::form(
        $o->auth_params($client, challenge => undef, state => 's2'))),
        'invalid_request', 'no code_challenge (PKCE required)', state => 's2');
    redirect_error($o->get('/oauth/authorize?' . SMCP::OAuth::form(
        $o->auth_params($client, challenge => $c, code_challenge_method => 'plain', state => 's3'))),
        'invalid_request', 'code_challenge_method plain', state => 's3');
    redirect_error($o->get('/oauth/authorize?' . SMCP::OAuth::form(
        $o->auth_params($client, challenge => $c, response_type => 'token', state => 's4'))),
        'unsupported_response_type', 'response_type token', state => 's4');
    redirect_error($o->get('/oauth/authorize?' . SMCP::OAuth::form(
        $o->auth_params($client, challenge => $c, scope => 'admin', state => 's5'))),
        'invalid_scope', 'scope admin', state => 's5');
    is(codes(), $n, 'no code issued');
};

subtest 'forged consent POSTs' => sub {
    my (undef, $c) = SMCP::OAuth::pkce();
    my @p = $o->auth_params($client, challenge => $c, state => 'forged');
    my $page = $o->authorize_page(@p);
    my $other = $o->authorize_page(@p);
    my $n = codes();

    my $forbidden = sub {
        my ($r, $name) = @_;
        subtest $name => sub {
            is($r->{status}, 403, 'HTTP 403');
            ok(!$r->{headers}{location}, 'no redirect');
            like($r->{body}, qr/Form refused/, 'says why');
        };
    };
    $forbidden->($o->consent($page, \@p, key => $key, cookie => undef), 'no cookie');
    $forbidden->($o->consent($page, \@p, key => $key, csrf => undef), 'no csrf field');
    $forbidden->($o->consent($page, \@p, key => $key, csrf => 'x'), 'a garbage csrf');
    $forbidden->($o->consent($page, \@p, key => $key, cookie => $other->{cookie}),
                 'another browser\'s cookie');
    $forbidden->($o->consent($page, \@p, key => $key, cookie => 'smcp_oauth_csrf=' . '0' x 32),
                 'a made-up cookie');
    my @swapped = map { $_ eq 'forged' ? 'other' : $_ } @p;
    $forbidden->($o->consent($page, \@swapped, key => $key), 'the request changed under the token');
    $forbidden->($o->consent($page, \@p, key => $key, origin => 'https://evil.example'),
                 'a cross-site Origin');

    # an old token, correctly signed: expired
    my ($ck) = $page->{cookie} =~ /=(.*)/;
    my %pp = @p;
    my $ts = time() - 700;
    my $mac = b64url(Digest::SHA::hmac_sha256(join('|', 'csrf', $ts, $ck,
        @pp{qw(client_id redirect_uri code_challenge state resource)}), $t->{secret}));
    my $r = $o->consent($page, \@p, key => $key, csrf => "$ts.$mac");
    $forbidden->($r, 'a form token older than 10 min');
    $ts = time() - 5;
    $mac = b64url(Digest::SHA::hmac_sha256(join('|', 'csrf', $ts, $ck,
        @pp{qw(client_id redirect_uri code_challenge state resource)}), $t->{secret}));
    $r = $o->consent($page, \@p, key => $key, csrf => "$ts.$mac");
    is($r->{status}, 302, 'the same construction, recent: accepted (the test computes it right)');
    is(codes(), $n + 1, 'only that one issued a code');

    $r = $o->consent($page, \@p, key => $key, origin => $issuer);
    is($r->{status}, 302, 'same-origin Origin: accepted');
};

subtest 'access keys and consent' => sub {
    my (undef, $c) = SMCP::OAuth::pkce();
    my @p = $o->auth_params($client, challenge => $c, state => 'k');
    my $page = $o->authorize_page(@p);
    my $n = codes();
    for my $case ([ 'garbage', 'abc' ],
                  [ 'a wrong signature', $t->token(secret => 'nope' x 8) ],
                  [ 'an expired key', $t->token(exp => time() - 10) ],
                  [ 'a ui token', $t->token(scope => 'ui') ],
                  [ 'an OAuth access token', $tokens->{access_token} ]) {
        my $r = $o->consent($page, \@p, key => $case->[1]);
        is($r->{status}, 401, "$case->[0]: the page again, 401");
        like($r->{body}, qr/That access key was not accepted/, '... saying so');
        ok(!$r->{headers}{location}, '... no redirect');
    }
    my $jti = 'rk-' . rhex(6);
    my $revoked = $t->token(jti => $jti);
    $t->redis('HSET', "${P}revoked", $jti, time() + 3600);
    my $r = $o->consent($page, \@p, key => $revoked);
    is($r->{status}, 401, 'a revoked key: 401');
    is(codes(), $n, 'no code issued');

    my $big = $t->token(repos => [ map { "org$_/repository-$_" } 1 .. 100 ]);
    ok(length($big) > 2048 && length($big) < 4096, 'a key of ' . length($big) . ' bytes');
    $r = $o->consent($page, \@p, key => $big);
    is($r->{status}, 302, '... signs in') or diag($r->{body});

    redirect_error($o->consent($page, \@p, action => 'deny'), 'access_denied',
                   'Deny', state => 'k');
};

subtest 'audience' => sub {
    my $r = $t->mcp_post($t->request_msg('initialize', {
        protocolVersion => '2025-11-25', capabilities => {},
        clientInfo => { name => 'x', version => '1' } }),
        token => $tokens->{access_token}, path => '/other/mcp');
    is($r->{status}, 401, 'our access token at a server with another MCP URL: 401');
    like($r->{headers}{'www-authenticate'} // '', qr/error="invalid_token"/, 'invalid_token');
    like($r->{headers}{'www-authenticate'} // '', qr/audience/, 'names the audience');
    $r = $t->mcp_post($ping, token => $t->token(extra => { aud => 'https://evil.example/mcp' }));
    is($r->{status}, 401, 'a token for another audience: 401');
    $r = $t->mcp_post($ping, token => $t->token(extra => { aud => [ $resource ] }));
    is($r->{status}, 401, 'an aud that is not a string: 401');
    my ($sid) = $t->initialize(token => $t->token(extra => { aud => $resource }));
    ok($sid, 'a token for this audience: accepted');
    ($sid) = $t->initialize(token => $t->token);
    ok($sid, 'today\'s bearer token (no aud): accepted unchanged');
};

subtest 'revocation (RFC 7009)' => sub {
    my ($tok) = $o->sign_in($client, key => $key);
    ok($tok->{refresh_token}, 'signed in');
    my $r = $o->post('/oauth/revoke', SMCP::OAuth::form(token => $tok->{refresh_token},
                     token_type_hint => 'refresh_token'));
    is($r->{status}, 200, 'refresh token revoked: 200');
    oauth_error($o->token(grant_type => 'refresh_token', refresh_token => $tok->{refresh_token},
                          client_id => $client->{client_id}),
                400, 'invalid_grant', 'it no longer refreshes');

    ($tok) = $o->sign_in($client, key => $key);
    my ($sid) = $t->initialize(token => $tok->{access_token});
    ok($sid, 'a new access token works');
    $r = $o->post('/oauth/revoke', SMCP::OAuth::form(token => $tok->{access_token}));
    is($r->{status}, 200, 'access token revoked: 200');
    ok(SMCP::Test::wait_until(30, sub {
        $t->mcp_post($ping, session => $sid, token => $tok->{access_token})->{status} == 401 }),
       '/mcp refuses it');
    is($o->post('/oauth/revoke', SMCP::OAuth::form(token => 'whatever'))->{status}, 200,
       'an unknown token: 200');
    oauth_error($o->post('/oauth/revoke', ''), 400, 'invalid_request', 'no token');
};

subtest "the nginx image's entrypoint: SMCP_OAUTH" => sub {
    my $dir = "$t->{dir}/entrypoint";
    mkdir $dir;
    my $render = sub {
        my ($oauth) = @_;
        # the script's render_mcp, run here (exec stubbed: nothing starts)
        my $sh = 'exec() { :; }; source "$1"; '
               . 'secret_conf="sandbox_mcp_secret_file $2;"; redis=127.0.0.1:1; '
               . 'prefix=""; password_conf=""; log_format=text; render_mcp';
        local %ENV = (%ENV, SMCP_RENDER_CONF => 'no', PROXY_JWT_SECRET => 'x',
                      SMCP_MCP_ADDR => '*', SMCP_OAUTH => $oauth,
                      SMCP_PUBLIC_URL => 'https://mcp.example.com',
                      SMCP_CONF_SCRIPTS => repo_root() . '/ngx_sandbox_mcp_module/conf');
        return run_cmd([ 'bash', '-c', $sh, 'render',
                         repo_root() . '/ngx_sandbox_mcp_module/docker-entrypoint.sh',
                         $t->{secret_file} ]);
    };
    my ($rc, $conf, $err) = $render->('on');
    is($rc, 0, 'renders') or diag($err);
    like($conf, qr/sandbox_mcp_oauth on;/, 'the switch');
    like($conf, qr{location /\.well-known/ \{\s*sandbox_mcp_oauth_endpoints;}, 'discovery');
    like($conf, qr{location /oauth/ \{\s*sandbox_mcp_oauth_endpoints;}, 'the endpoints');
    like($conf, qr{limit_req_zone \$binary_remote_addr zone=smcp_oauth_addr:10m rate=30r/m;},
         'a per-address limit (oauth-locations.sh)');
    like($conf, qr!location = /oauth/register \{[^}]*limit_req zone=smcp_oauth_addr burst=30 nodelay;!,
         '... on registration');
    like($conf, qr!location = /oauth/authorize \{[^}]*limit_req zone=smcp_oauth_addr burst=30 nodelay;!,
         '... and on the authorization endpoint');
    my $load = $t->{static} ? '' : 'load_module ' . module_path() . ';';
    $conf =~ s{load_module modules/\S+;}{$load};
    $conf =~ s{user www-data;}{$> == 0 ? 'user root;' : ''}e;
    $conf =~ s{pid /run/nginx.pid;}{pid $dir/nginx.pid;};
    SMCP::Test::_write_file("$dir/nginx.conf", $conf);
    my ($trc, $tout, $terr) = SMCP::Test::nginx_config_test($t->{nginx_bin}, '-p', "$dir/",
        '-c', "$dir/nginx.conf", '-e', "$dir/error.log");
    is($trc, 0, 'nginx -t accepts it') or diag("$tout$terr");
    ($rc, $conf) = $render->('off');
    unlike($conf, qr/oauth/, 'off: nothing of it');
    ($rc, undef, $err) = $render->('maybe');
    isnt($rc, 0, 'another value: refused');
    like($err, qr/SMCP_OAUTH=maybe: on or off/, '... saying so');
};

subtest 'no secret in the logs' => sub {
    my $log = $t->error_log;
    unlike($log, qr/\Q$t->{secret}\E/, 'not the signing secret');
    unlike($log, qr/\Q$tokens->{refresh_token}\E/, 'not a refresh token');
    unlike($log, qr/\Q$code\E/, 'not a code');
    unlike($log, qr/\Q$key\E/, 'not an access key');
};

done_testing();
