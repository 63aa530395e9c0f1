#!/usr/bin/env perl
# The egress proxy on the host (no containers): every shipped route swaps
# the sandbox's run token for the real credential, strips every token
# header, refuses what it must with JSON the agent can read, streams, and
# records an audit event per request.  (t/egress_sandbox.t repeats the
# important parts from inside real sandbox containers.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Encode ();
use IO::Socket::INET;
use MIME::Base64 qw(encode_base64);
use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(:all);
use SMCP::Fakes qw(parse_sse);


# real credentials: unique strings we can grep for anywhere
my %real = (
    ANTHROPIC_API_KEY    => 'sk-ant-REAL-' . rhex(),
    COMPAT_API_KEY       => 'sk-compat-REAL-' . rhex(),
    OPENAI_API_KEY       => 'sk-openai-REAL-' . rhex(),
    AZURE_OPENAI_API_KEY => 'azure-REAL-' . rhex(),
    GOOGLE_API_KEY       => 'goog-REAL-' . rhex(),
    CF_AIG_TOKEN         => 'cfaig-REAL-' . rhex(),
    GITHUB_TOKEN         => 'ghp_REAL' . rhex(),
);

# a Redis timeout the answer without Redis is measured against
my $t = SMCP::Test->new(workers => 2, redis_timeout => '10s');

my $anthropic = SMCP::Fakes::start_anthropic(
    key => $real{ANTHROPIC_API_KEY}, chunk_delay => 0.4, deltas => 4,
    text => 'streamed through the proxy');
my $openai = SMCP::Fakes::start_openai(key => $real{OPENAI_API_KEY});
my $compat = SMCP::Fakes::start_openai(key => $real{COMPAT_API_KEY});
my $github = SMCP::Fakes::start_github(token => $real{GITHUB_TOKEN});
$github->create_repo('owner/repo', files => { 'README.md' => "hello\n" });

my $eport = $t->free_port;
my $echo = $t->free_port;
my $down = $t->free_port;     # nothing listens there

local @ENV{keys %real} = values %real;
local $ENV{ANTHROPIC_BASE_URL} = $anthropic->url;
local $ENV{OPENAI_BASE_URL} = $openai->url;
local $ENV{COMPAT_BASE_URL} = $compat->url;
local $ENV{AZURE_OPENAI_BASE_URL} = "http://127.0.0.1:$echo";
local $ENV{GOOGLE_BASE_URL} = "http://127.0.0.1:$echo";
local $ENV{CF_AIG_BASE_URL} = "http://127.0.0.1:$echo/v1/acct/gw";
local $ENV{GITHUB_URL} = $github->url;
local $ENV{GITHUB_API_URL} = $github->url;
local $ENV{SMCP_EGRESS_RATE} = '1000r/s';    # t/egress_limits.t tests it

ok(eval { $t->render_routes }, 'egress-routes.sh renders the routes') or diag($@);

# the echo upstream shows which credential headers arrived
my $echo_body = join ',', map { my $v = $_; $v =~ s/-/_/g; qq{"$_":"\$http_$v"} }
    qw(authorization x-api-key api-key x-goog-api-key cf-aig-authorization);

$t->start(http => <<"NGINX");
    include %%DIR%%/routes-http.conf;

    server {
        listen 127.0.0.1:$eport;
        include %%DIR%%/routes.conf;

        location /down/ {
            sandbox_mcp_egress down;
            sandbox_mcp_egress_credential env:COMPAT_API_KEY bearer;
            proxy_set_header Authorization \$sandbox_mcp_credential;
            proxy_pass http://127.0.0.1:$down/;
        }
    }

    server {
        listen 127.0.0.1:$echo;
        default_type application/json;
        location / {
            return 200 '{$echo_body,"uri":"\$request_uri"}';
        }
    }
NGINX

# a live run of alice's that asked for a pull request, and its egress token
my ($run, $tok) = $t->live_run(repository => 'https://github.com/owner/repo', create_pr => 1);

# a POST to a model route is a JSON object, as every SDK sends it (the
# egress reads it: t/egress_server_tools.t); GitHub's routes as given
sub egress {
    my (%o) = @_;
    my @h = @{ $o{headers} // [] };
    my $method = $o{method} // 'POST';
    if ($method eq 'POST' && $o{path} !~ m{^/github}) {
        push @h, 'Content-Type' => 'application/json'
            unless grep { lc $_ eq 'content-type' } @h[grep { !($_ % 2) } 0 .. $#h];
        $o{body} //= '{}';
    }
    return $t->http(port => $eport, method => $method,
                    path => $o{path}, headers => \@h,
                    body => $o{body}, timeout => $o{timeout} // 20);
}

my $msg = json_encode({ model => 'claude-sonnet-4-5', max_tokens => 64,
    stream => JSON::PP::true(), messages => [{ role => 'user', content => 'hi' }] });

###############################################################################
# Anthropic: x-api-key swapped, streaming chunk by chunk

my $anthropic_r;    # its audit event is checked below
{
    my $r = $anthropic_r = egress(path => '/anthropic/v1/messages',
        headers => [ 'x-api-key' => $tok, 'anthropic-version' => '2023-06-01',
                     'Content-Type' => 'application/json' ],
        body => $msg, timeout => 30);
    is($r->{status}, 200, 'anthropic: 200 through the proxy');
    like($r->{headers}{'content-type'} // '', qr{text/event-stream},
         'anthropic: an event stream');
    my @ev = parse_sse($r->{body});
    is($ev[0]{event}, 'message_start', 'anthropic: first event message_start');
    is($ev[-1]{event}, 'message_stop', 'anthropic: last event message_stop');

    my $req = $anthropic->last_request(path => '/v1/messages');
    is($req->{headers}{'x-api-key'}, $real{ANTHROPIC_API_KEY},
       'anthropic fake saw the real key');
    ok(!grep({ index($_->[1], $tok) >= 0 } @{ $req->{header_list} }),
       'anthropic fake never saw the run token');
}

# first byte before the upstream finished: events are 0.4 s apart
{
    my $sock = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$eport",
                                     Timeout => 5) or die $!;
    print $sock "POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\n"
        . "x-api-key: $tok\r\nContent-Type: application/json\r\n"
        . "Content-Length: " . length($msg) . "\r\nConnection: close\r\n\r\n"
        . $msg;
    my ($first, $buf) = (undef, '');
    while (1) {
        my $n = sysread($sock, my $chunk, 65536);
        last unless $n;
        $buf .= $chunk;
        $first //= time() if $buf =~ /event: message_start/;
    }
    my $last = time();
    ok(defined $first, 'streamed: saw the first event');
    ok(defined $first && $last - $first > 1.0,
       sprintf('streamed: first event %.2f s before the end (unbuffered)',
               $last - ($first // $last)));
}

###############################################################################
# every provider route: the right header with the real credential

{
    my $r = egress(path => '/compat/v1/chat/completions',
                   headers => [ Authorization => "Bearer $tok",
                                'Content-Type' => 'application/json' ],
                   body => '{"model":"m","messages":[{"role":"user","content":"hi"}]}');
    is($r->{status}, 200, 'compat: 200');
    my $req = $compat->last_request;
    is($req->{headers}{authorization}, "Bearer $real{COMPAT_API_KEY}",
       'compat fake saw Bearer <real key>');

    $r = egress(path => '/openai/v1/responses',
                headers => [ Authorization => "Bearer $tok",
                             'Content-Type' => 'application/json' ],
                body => '{"model":"gpt","input":"hi"}');
    is($r->{status}, 200, 'openai: 200');
    is($openai->last_request->{headers}{authorization},
       "Bearer $real{OPENAI_API_KEY}", 'openai fake saw Bearer <real key>');
}

for my $case (
    [ azure => 'api-key', 'api-key', $real{AZURE_OPENAI_API_KEY},
      '/azure/openai/v1/responses' ],
    [ google => 'x-goog-api-key', 'x-goog-api-key', $real{GOOGLE_API_KEY},
      '/google/v1beta/models/gemini:streamGenerateContent?alt=sse' ],
    [ cloudflare => 'cf-aig-authorization', 'cf-aig-authorization',
      "Bearer $real{CF_AIG_TOKEN}", '/cloudflare/anthropic/v1/messages' ],
) {
    my ($route, $sends, $want_header, $want, $path) = @$case;
    # the sandbox sends its token where its SDK puts the key, plus an
    # Authorization header for good measure: none may pass
    my $r = egress(path => $path,
                   headers => [ $sends => ($sends eq 'cf-aig-authorization'
                                           ? "Bearer $tok" : $tok),
                                Authorization => "Bearer $tok" ]);
    is($r->{status}, 200, "$route: 200");
    my $j = json_decode($r->{body}) // {};
    is($j->{$want_header}, $want,
       "$route: upstream got $want_header = the real credential");
    for my $h (sort grep { $_ ne $want_header && $_ ne 'uri' } keys %$j) {
        is($j->{$h}, '', "$route: no $h header upstream");
    }
    unlike($r->{body}, qr/\Q$tok\E/, "$route: the run token did not pass");
    (my $up = $path) =~ s{^/$route}{};
    $up = "/v1/acct/gw$up" if $route eq 'cloudflare';
    is($j->{uri}, $up, "$route: path and query passed on");
}

###############################################################################
# GitHub: git smart HTTP and the REST allow-list, pinned to the run's repo

{
    my $basic = 'Basic ' . encode_base64("x-access-token:$tok", '');
    my $r = egress(method => 'GET',
                   path => '/github/owner/repo.git/info/refs?service=git-upload-pack',
                   headers => [ Authorization => $basic ]);
    is($r->{status}, 200, 'github git: info/refs 200');
    like($r->{body}, qr/git-upload-pack/, 'github git: smart HTTP advertisement');
    my $req = $github->last_request;
    is($req->{auth}, 'ok', 'github fake accepted the injected credential');
    is($req->{headers}{authorization},
       'Basic ' . encode_base64("x-access-token:$real{GITHUB_TOKEN}", ''),
       'github fake saw Basic x-access-token:<real token>');

    # a real git client, from the host, through the proxy
    my $wd = $t->dir . '/clone';
    my $out = `git -c 'http.extraHeader=Authorization: $basic' clone -q http://127.0.0.1:$eport/github/owner/repo.git $wd 2>&1`;
    is($?, 0, 'git clone through the proxy') or diag($out);
    ok(-f "$wd/README.md", 'the clone has the files');
    `cd $wd && git -c user.name=t -c user.email=t\@t commit -q --allow-empty -m 'via proxy' 2>&1`;
    $out = `cd $wd && git -c 'http.extraHeader=Authorization: $basic' push -q origin HEAD:refs/heads/opencode/$run 2>&1`;
    is($?, 0, 'git push of the run\'s branch through the proxy') or diag($out);
    ok($github->ref_commit('owner/repo', "opencode/$run"),
       'the pushed branch is upstream');

    $r = egress(path => '/github-api/repos/owner/repo/pulls',
                headers => [ Authorization => "Bearer $tok",
                             'Content-Type' => 'application/json' ],
                body => qq({"title":"t","head":"opencode/$run","base":"main"}));
    is($r->{status}, 201, 'github api: pull request created') or diag($r->{body});
    is($github->last_request->{headers}{authorization},
       "Bearer $real{GITHUB_TOKEN}", 'github api fake saw Bearer <real token>');

    $r = egress(method => 'GET', path => '/github-api/repos/owner/repo',
                headers => [ Authorization => "Bearer $tok" ]);
    is($r->{status}, 200, 'github api: repository lookup');

    egress_error_ok(egress(method => 'GET',
                           path => '/github/owner/repo.git/objects/info/packs',
                           headers => [ Authorization => "Bearer $tok" ]),
                    403, 'git path outside smart HTTP');
    egress_error_ok(egress(method => 'GET', path => '/github-api/user',
                           headers => [ Authorization => "Bearer $tok" ]),
                    403, 'REST path outside the allow-list');
    egress_error_ok(egress(method => 'GET',
                           path => '/github/other/repo.git/info/refs?service=git-upload-pack',
                           headers => [ Authorization => "Bearer $tok" ]),
                    403, 'another repository (git)');
    egress_error_ok(egress(method => 'GET', path => '/github-api/repos/other/repo',
                           headers => [ Authorization => "Bearer $tok" ]),
                    403, 'another repository (REST)');
}

###############################################################################
# refusals

my $n_before = scalar @{ $anthropic->requests };

egress_error_ok(egress(path => '/anthropic/v1/messages', body => $msg),
                401, 'no token');
egress_error_ok(egress(path => '/anthropic/v1/messages', body => $msg,
                       headers => [ 'x-api-key' => $t->token(sub => 'alice',
                           scope => 'egress', run => $run,
                           secret => 'forged-secret-0123456789') ]),
                401, 'forged token');
egress_error_ok(egress(path => '/anthropic/v1/messages', body => $msg,
                       headers => [ 'x-api-key' => $t->token(sub => 'alice',
                           scope => 'egress', run => $run, exp => int(CORE::time()) - 5) ]),
                401, 'expired token');
egress_error_ok(egress(path => '/anthropic/v1/messages', body => $msg,
                       headers => [ 'x-api-key' => $t->token(sub => 'alice',
                           scope => 'mcp', run => $run) ]),
                401, 'an MCP token');
egress_error_ok(egress(path => '/anthropic/v1/messages', body => $msg,
                       headers => [ 'x-api-key' => $t->token(sub => 'alice',
                           scope => 'egress', run => $run, alg => 'none') ]),
                401, 'alg none');
egress_error_ok(egress(path => '/anthropic/v1/messages', body => $msg,
                       headers => [ 'x-api-key' => $t->token(sub => 'mallory',
                           scope => 'egress', run => $run) ]),
                401, "another tenant's token for the run");
my $ghost = 'run_' . rhex();
egress_error_ok(egress(path => '/anthropic/v1/messages', body => $msg,
                       headers => [ 'x-api-key' => $t->token(sub => 'alice',
                           scope => 'egress', run => $ghost) ]),
                401, 'a run that does not exist');
is($t->redis('EXISTS', "smcp:run:$ghost:events"), 0,
   'no audit stream is made for a run that does not exist');

for my $st (qw(completed failed cancelled)) {
    $t->redis('HSET', "smcp:run:$run", status => $st);
    egress_error_ok(egress(path => '/anthropic/v1/messages', body => $msg,
                           headers => [ 'x-api-key' => $tok ]),
                    401, "run $st");
}
$t->redis('HSET', "smcp:run:$run", status => 'started');
is(egress(path => '/compat/v1/chat/completions',
          headers => [ Authorization => "Bearer $tok",
                       'Content-Type' => 'application/json' ],
          body => '{"model":"m","messages":[]}')->{status},
   200, 'a started run may use egress');
$t->redis('HSET', "smcp:run:$run", status => 'running');

is(scalar @{ $anthropic->requests }, $n_before,
   'no refused request reached the upstream');

egress_error_ok(egress(path => '/nope/v1/x', headers => [ 'x-api-key' => $tok ]),
                404, 'unknown route');
egress_error_ok(egress(path => '/down/v1/x', headers => [ Authorization => "Bearer $tok" ]),
                502, 'upstream down');

###############################################################################
# allow-lists: per provider, only the inference endpoints OpenCode uses;
# files, batches, fine-tunes, vector stores, model lists: 403, and never
# upstream

{
    my %auth = (
        anthropic  => [ 'x-api-key' => $tok ],
        openai     => [ Authorization => "Bearer $tok" ],
        compat     => [ Authorization => "Bearer $tok" ],
        azure      => [ 'api-key' => $tok ],
        google     => [ 'x-goog-api-key' => $tok ],
        cloudflare => [ 'cf-aig-authorization' => "Bearer $tok" ],
    );
    my @up = ($anthropic, $openai, $compat);
    my @n0 = map { scalar @{ $_->requests } } @up;
    my $echo_n0 = () = $t->read_file('access.log') =~ /^.*" 200 .*$/mg;

    for my $c (
        [ anthropic => GET => '/v1/files' ], [ anthropic => POST => '/v1/files' ],
        [ anthropic => POST => '/v1/messages/batches' ], [ anthropic => GET => '/v1/models' ],
        [ anthropic => POST => '/v1/messages/x' ], [ anthropic => POST => '/v1/complete' ],
        [ anthropic => POST => '/v1/messages/../files' ],
        [ anthropic => POST => '/v1/messages%2F..%2Ffiles' ],
        [ anthropic => POST => '/v1/files?x=/v1/messages' ],
        [ openai => POST => '/v1/files' ], [ openai => POST => '/v1/batches' ],
        [ openai => POST => '/v1/fine_tuning/jobs' ], [ openai => POST => '/v1/vector_stores' ],
        [ openai => GET => '/v1/models' ], [ openai => POST => '/v1/embeddings' ],
        [ openai => POST => '/v1/responses/x/cancel' ], [ openai => POST => '/v1/assistants' ],
        [ compat => GET => '/v1/models' ], [ compat => POST => '/v1/embeddings' ],
        [ compat => POST => '/v1/files' ],
        [ azure => POST => '/openai/files?api-version=2024-10-21' ],
        [ azure => POST => '/openai/deployments/d/embeddings?api-version=2024-10-21' ],
        [ azure => POST => '/openai/v1/files' ], [ azure => POST => '/openai/v1/fine_tuning/jobs' ],
        [ google => POST => '/v1beta/files' ], [ google => POST => '/upload/v1beta/files' ],
        [ google => GET => '/v1beta/models' ], [ google => POST => '/v1beta/cachedContents' ],
        [ google => POST => '/v1beta/models/gemini:embedContent' ],
        [ google => POST => '/v1beta/tunedModels' ],
        [ cloudflare => POST => '/openai/files' ], [ cloudflare => POST => '/anthropic/v1/files' ],
        [ cloudflare => POST => '/openai/batches' ], [ cloudflare => POST => '/' ],
        # what OpenCode 1.18.33 does not call (t/providers.t): token
        # counts, the other API flavours, the gateway's other vendors
        [ anthropic => POST => '/v1/messages/count_tokens' ],
        [ openai => POST => '/v1/chat/completions' ],
        [ azure => POST => '/openai/v1/chat/completions' ],
        [ azure => POST => '/openai/deployments/d/chat/completions?api-version=2024-10-21' ],
        [ azure => POST => '/openai/deployments/d/responses?api-version=2025-04-01-preview' ],
        [ azure => POST => '/openai/responses?api-version=2025-04-01-preview' ],
        [ google => POST => '/v1beta/models/g:generateContent' ],
        [ google => POST => '/v1beta/models/g:countTokens' ],
        [ google => POST => '/v1/models/g:streamGenerateContent' ],
        [ cloudflare => POST => '/openai/chat/completions' ],
        [ cloudflare => POST => '/anthropic/v1/messages/count_tokens' ],
        [ cloudflare => POST => '/compat/chat/completions' ],
        [ cloudflare => POST => '/workers-ai/v1/chat/completions' ],
        [ cloudflare => POST => '/azure-openai/res/dep/chat/completions' ],
        [ cloudflare => POST => '/google-ai-studio/v1beta/models/g:generateContent' ],
    ) {
        my ($route, $method, $path) = @$c;
        egress_error_ok(egress(method => $method, path => "/$route$path",
                               headers => $auth{$route}, body => '{}'),
                        403, "$route: $method $path");
    }
    egress_error_ok(egress(method => 'GET', path => '/anthropic/v1/messages',
                           headers => $auth{anthropic}), 405, 'anthropic: GET /v1/messages');
    egress_error_ok(egress(path => '/openai/v1/files', body => '{}'),
                    401, 'a refused endpoint without a token: 401 first');

    is_deeply([ map { scalar @{ $_->requests } } @up ], \@n0,
              'no refused endpoint reached a model upstream');
    my $echo_n = () = $t->read_file('access.log') =~ /^.*" 200 .*$/mg;
    is($echo_n, $echo_n0, '... nor the echo upstream');

    # what an allowed route passes on is what was matched
    my $r = egress(path => '/anthropic/v1/x/../messages', body => $msg,
                   headers => [ @{ $auth{anthropic} }, 'Content-Type' => 'application/json' ]);
    is($r->{status}, 200, 'anthropic: /v1/x/../messages is /v1/messages');
    is($anthropic->last_request->{path}, '/v1/messages', '... and upstream saw /v1/messages');
    for my $ok ('/v1/messages') {
        my $r = egress(path => "/anthropic$ok", body => $msg,
                       headers => [ @{ $auth{anthropic} }, 'Content-Type' => 'application/json' ]);
        isnt($r->{status}, 403, "anthropic: POST $ok is allowed");
    }
    for my $ok ('/openai/v1/responses') {
        my $r = egress(path => "/azure$ok", headers => $auth{azure}, body => '{}');
        is($r->{status}, 200, "azure: POST $ok");
        is((json_decode($r->{body}) // {})->{uri}, $ok, "... upstream $ok");
    }
    for my $ok ('/v1beta/models/gemini-2.5-pro:streamGenerateContent') {
        is(egress(path => "/google$ok", headers => $auth{google}, body => '{}')->{status},
           200, "google: POST $ok");
    }
    for my $ok ('/anthropic/v1/messages', '/openai/responses',
                '/google-ai-studio/v1beta/models/g:streamGenerateContent') {
        my $r = egress(path => "/cloudflare$ok", headers => $auth{cloudflare}, body => '{}');
        is($r->{status}, 200, "cloudflare: POST $ok");
        is((json_decode($r->{body}) // {})->{uri}, "/v1/acct/gw$ok", "... upstream /v1/acct/gw$ok");
    }

    # a refusal of the allow-list is audited, as not granted
    my @d = map { $_->{json} } $t->run_events($run);
    ok((grep { $_->{path} eq '/openai/v1/batches' && $_->{status} == 403 && !$_->{granted} } @d),
       'audit: a refused endpoint is recorded (403, not granted)');
}

###############################################################################
# audit: one egress event per request, no secrets, no query strings

{
    my @eg = $t->run_events($run, type => 'egress');
    ok(@eg >= 10, scalar(@eg) . ' egress audit events recorded');
    # the first: the streamed call at the top of this file
    my ($a) = grep { $_->{json}{route} eq 'anthropic' && $_->{json}{granted} } @eg;
    ok($a, 'an anthropic event');
    is($a->{json}{method}, 'POST', 'audit: method');
    is($a->{json}{path}, '/anthropic/v1/messages', 'audit: path');
    is($a->{json}{status}, 200, 'audit: status');
    is($a->{json}{bytesIn}, $anthropic_r->{sent}, 'audit: bytesIn, the request as sent');
    is($a->{json}{bytesOut}, length($anthropic_r->{raw}),
       'audit: bytesOut, the response as received');
    # the proxy's times sit inside the client's (order, not speed: the
    # fake's 0.4 s between events make the stream over 1 s); nginx's clock
    # is its event loop's: a few ms of slack
    my $ms = $a->{json}{durationMs};
    ok($ms >= 1000 && $ms <= $anthropic_r->{elapsed} * 1000 + 50,
       sprintf('audit: duration %s ms, the stream (over 1 s), within the %d ms the client took',
               $ms // 'null', $anthropic_r->{elapsed} * 1000));
    my $ts = $a->{ts} // 0;
    ok($ts >= int(($anthropic_r->{t0} // 0) * 1000) - 50 && $ts <= now_ms(),
       "audit: time (ms), at the request ($ts)");
    my ($g) = grep { $_->{json}{path} =~ m{/google/} } @eg;
    ok($g && $g->{data} !~ /\?/, 'audit: no query string');
    my ($refused) = grep { !$_->{json}{granted} && $_->{json}{status} == 401 } @eg;
    ok($refused && $refused->{json}{status} == 401,
       'audit: refused requests are recorded too');
    my $all = join "\n", map { $_->{data} } @eg;
    unlike($all, qr/\Q$tok\E/, 'audit: no token');
    unlike($all, qr/REAL/, 'audit: no real credential');
}

###############################################################################
# the inbox (location = /smcp/inbox): the sandbox takes the messages for its
# agent, oldest first, with its run token; what is taken is delivered (in
# the run's timeline), and the polls are not in the egress audit record

subtest 'inbox: a live run takes its messages, oldest first' => sub {
    my ($irun, $itok) = $t->live_run(repository => 'https://github.com/owner/repo');
    my ($orun, $otok) = $t->live_run(repository => 'https://github.com/owner/repo');
    my $inbox = "smcp:run:$irun:inbox";
    my $get = sub {
        my (%o) = @_;
        return egress(method => $o{method} // 'GET', path => '/smcp/inbox',
                      headers => $o{headers} // [ Authorization => "Bearer $itok" ],
                      (exists $o{body} ? (body => $o{body}) : ()));
    };

    # nothing waits: 204, no body, nothing written
    my $r = $get->();
    is($r->{status}, 204, 'empty inbox: 204');
    is($r->{body}, '', 'empty inbox: no body');
    is($r->{headers}{'smcp-message-id'}, undef, 'empty inbox: no Smcp-Message-Id');
    is($t->redis('EXISTS', "smcp:run:$irun:events"), 0,
       'empty inbox: nothing written to the run\'s events');

    # two messages, as the module pushes them; characters, sent as UTF-8
    my @text = (qq{first "quoted"\nline two \x{e9} \x{2713}}, 'second, plain');
    $t->redis('RPUSH', $inbox, json_encode({ id => 1, text => $text[0] }));
    $t->redis('RPUSH', $inbox, json_encode({ id => 2, text => $text[1] }));
    my @raw = @{ $t->redis('LRANGE', $inbox, 0, -1) };
    is(scalar @raw, 2, 'two messages wait');

    # refused, and the inbox untouched
    egress_error_ok($get->(headers => []), 401, 'inbox without a token');
    egress_error_ok($get->(headers => [ Authorization => 'Bearer ' . $t->token(
                        sub => 'mallory', scope => 'egress', run => $irun) ]),
                    401, "inbox with another tenant's token for the run");
    egress_error_ok($get->(method => 'POST', body => '{}'), 405, 'inbox POST');
    egress_error_ok($get->(method => 'DELETE'), 405, 'inbox DELETE');
    for my $st (qw(completed failed cancelled)) {
        $t->redis('HSET', "smcp:run:$irun", status => $st);
        egress_error_ok($get->(), 401, "inbox of a $st run");
    }
    $t->redis('HSET', "smcp:run:$irun", status => 'started');

    # another run's valid token reads its own (empty) inbox only
    $r = $get->(headers => [ 'x-api-key' => $otok ]);
    is($r->{status}, 204, "another run's token: 204, its own inbox is empty");
    is($r->{body}, '', "another run's token: no body");
    is_deeply($t->redis('LRANGE', $inbox, 0, -1), \@raw,
              'after the refusals and the other run: this run\'s inbox untouched');
    is($t->redis('EXISTS', "smcp:run:$orun:events"), 0,
       'the other run\'s events: nothing written');

    # taken oldest first, byte-exact; a started run is live; the run's
    # channel hears of each
    my $sub = SMCP::Test::Redis->new(port => $t->redis_port);
    $sub->subscribe("smcp:run:$irun");
    for my $i (1, 2) {
        $r = $get->(headers => $i == 1 ? [ Authorization => "Bearer $itok" ]
                                       : [ 'x-api-key' => $itok ]);
        is($r->{status}, 200, "message $i: 200");
        is($r->{headers}{'smcp-message-id'}, $i, "message $i: Smcp-Message-Id $i");
        is($r->{headers}{'content-type'}, 'text/plain; charset=utf-8',
           "message $i: text/plain; charset=utf-8");
        is($r->{body}, Encode::encode_utf8($text[$i - 1]),
           "message $i: the text, byte for byte");
        is($r->{headers}{'content-length'}, length Encode::encode_utf8($text[$i - 1]),
           "message $i: its length");
        is($t->redis('LLEN', $inbox), 2 - $i, "message $i: taken from the inbox");
        is_deeply($sub->next_message(5), [ "smcp:run:$irun", 'message' ],
                  "message $i: published on the run's channel");
        $t->redis('HSET', "smcp:run:$irun", status => 'running') if $i == 1;
    }
    $sub->close;
    $r = $get->();
    is($r->{status}, 204, 'all taken: 204');
    is($r->{body}, '', 'all taken: no body');
    is($t->redis('EXISTS', $inbox), 0, 'all taken: the inbox list is gone');

    # the timeline: two 'message' events, delivered, and nothing else (no
    # 'egress' event for any inbox request, taken or refused)
    my @ev = $t->run_events($irun);
    is_deeply([ map { [ $_->{type}, $_->{json} ] } @ev ],
              [ [ message => { id => 1, delivered => JSON::PP::true() } ],
                [ message => { id => 2, delivered => JSON::PP::true() } ] ],
              'events: message 1 then 2, delivered, and nothing else');
    ok(!(grep { ($_->{ts} // '') !~ /^\d{13}$/ } @ev), 'events: each has a ms time');
    is(scalar(grep { ($_->{json}{route} // '') eq 'inbox' }
                   $t->run_events($irun, type => 'egress'),
                   $t->run_events($orun, type => 'egress'),
                   $t->run_events($run, type => 'egress')),
       0, 'no egress audit event with route inbox');
    is($t->redis('EXISTS', "smcp:run:$orun:events"), 0,
       'the other run\'s events: still nothing');
};

###############################################################################
# Redis away: fail closed, fast, with JSON

{
    $t->stop_redis;
    my $t0 = time();
    my $r = egress(path => '/anthropic/v1/messages', body => $msg,
                   headers => [ 'x-api-key' => $tok ]);
    egress_error_ok($r, 503, 'Redis down');
    ok(time() - $t0 < 5, sprintf('Redis down: answered at once (%.3f s), not after the '
                                 . '10 s Redis timeout', time() - $t0));
    $t->start_redis;
    $t->redis('HSET', "smcp:run:$run", tenant => 'alice', status => 'running',
              repository => 'https://github.com/owner/repo', create_pr => 1);
    ok(wait_until(10, sub {
        egress(path => '/compat/v1/chat/completions',
               headers => [ Authorization => "Bearer $tok" ],
               body => '{"model":"m","messages":[]}')->{status} == 200 }),
       'egress works again once Redis is back');
}

###############################################################################
# no secret in nginx's logs

{
    my $logs = $t->read_file('error.log') . $t->read_file('access.log');
    for my $k (sort keys %real) {
        unlike($logs, qr/\Q$real{$k}\E/, "logs: no $k");
    }
    unlike($logs, qr/\Q$tok\E/, 'logs: no run token');
}

$_->stop for ($anthropic, $openai, $compat, $github);
$t->done;
