#!/usr/bin/env perl
# The egress meter (issue 26: every agent behind the same limits): each
# model answer through the egress is read as it streams back (the
# provider's usage, never the agent's report), priced by
# sandbox_mcp_egress_price (SMCP_EGRESS_PRICES) for the model the request
# named, and added to the run's metered totals (run hash metered_*); the
# audit record says it; a model request of a run whose metered cost has
# reached its maxCostUsd is refused (402, billing_error) before anything
# goes upstream.  Each provider format, streaming and not, on the routes
# egress-routes.sh renders, in front of the fake providers.  Hostile: the
# model's text holding a usage object, a request body naming a cheap model
# inside a tool before the real one, an answer without usage, a stream the
# upstream cuts before its last usage, a request the provider takes but
# never answers (the sandbox gives up first; the provider closes, and
# error_page drops the request's context), a background response asked
# for, a metered cost too large to read as a number, a compressed answer
# asked for, bad prices in the configuration.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(:all);
use SMCP::Fakes;

my %real = (
    ANTHROPIC_API_KEY => 'sk-ant-REAL-' . rhex(),
    OPENAI_API_KEY    => 'sk-openai-REAL-' . rhex(),
    GOOGLE_API_KEY    => 'goog-REAL-' . rhex(),
    COMPAT_API_KEY    => 'sk-compat-REAL-' . rhex(),
);

my $t = SMCP::Test->new(workers => 2);

my %fake = (
    anthropic => SMCP::Fakes::start_anthropic(key => $real{ANTHROPIC_API_KEY}),
    openai    => SMCP::Fakes::start_openai(key => $real{OPENAI_API_KEY}),
    google    => SMCP::Fakes::start_gemini(key => $real{GOOGLE_API_KEY}),
    compat    => SMCP::Fakes::start_openai(key => $real{COMPAT_API_KEY}),
);

local @ENV{keys %real} = values %real;
local $ENV{ANTHROPIC_BASE_URL} = $fake{anthropic}->url;
local $ENV{OPENAI_BASE_URL} = $fake{openai}->url;
local $ENV{GOOGLE_BASE_URL} = $fake{google}->url;
local $ENV{COMPAT_BASE_URL} = $fake{compat}->url;
local $ENV{SMCP_EGRESS_RATE} = '1000r/s';

my $prices = 'claude-sonnet-4-5=3/15/0.3/3.75 gpt-5*=1.25/10/0.125,'
           . 'gemini-2.5-pro=1.25/10 qwen3*=0.5/1.5 free*=0/0';

ok(eval { $t->render_routes(SMCP_EGRESS_PRICES => $prices) },
   'egress-routes.sh renders the routes with SMCP_EGRESS_PRICES') or diag($@);
my $conf = $t->read_file('routes.conf');
like($conf, qr/^sandbox_mcp_egress_price claude-sonnet-4-5 3 15 0\.3 3\.75;$/m,
     '... as sandbox_mcp_egress_price lines');
like($conf, qr/^sandbox_mcp_egress_price gpt-5\* 1\.25 10 0\.125;$/m, '... a prefix, a comma');
like($conf, qr/proxy_set_header Accept-Encoding "";/, '... the model routes ask for no compression');
for my $bad ('claude=3', 'claude=a/b', 'cl aude=1/2', 'x;y=1/2', '=1/2', 'x=1.1234567/2',
             'x=1/2/3/4/5') {
    ok(!eval { $t->render_routes(name => 'bad', SMCP_EGRESS_PRICES => $bad) },
       "SMCP_EGRESS_PRICES=$bad: refused");
}

my $eport = $t->free_port;
$t->start(http => egress_server_conf("127.0.0.1:$eport"), server => <<"SERVER");
        location = /metrics {
            sandbox_mcp_metrics;
        }
SERVER

my %route = (
    anthropic => [ '/anthropic/v1/messages', 'x-api-key' ],
    openai    => [ '/openai/v1/responses', 'Authorization' ],
    google    => [ '/google/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse',
                   'x-goog-api-key' ],
    compat    => [ '/compat/v1/chat/completions', 'Authorization' ],
);

sub post {
    my ($route, $tok, $body, %o) = @_;
    my ($path, $h) = @{ $route{$route} };
    my $v = $h eq 'x-api-key' || $h eq 'x-goog-api-key' ? $tok : "Bearer $tok";
    return $t->http(port => $eport, method => 'POST', path => $path,
                    headers => [ $h => $v, 'anthropic-version' => '2023-06-01',
                                 'Content-Type' => 'application/json',
                                 @{ $o{headers} // [] } ],
                    body => ref $body ? json_encode($body) : $body, timeout => 30);
}

sub metered {
    my ($run) = @_;
    my %h = @{ $t->redis('HGETALL', "smcp:run:$run") || [] };
    return { map { ($_ => $h{"metered_$_"}) }
             qw(input output cache_read cache_write cost unpriced) };
}

# the audit records' usage, once the log phase wrote them
sub usages {
    my ($run, $n) = @_;
    my @u;
    for (1 .. 50) {
        @u = map { $_->{json}{usage} } grep { $_->{json}{usage} }
             $t->run_events($run, type => 'egress');
        last if @u >= $n;
        select(undef, undef, undef, 0.1);
    }
    return @u;
}

sub usd { return sprintf('%.6f', $_[0] // 0) }

my %anthropic = (model => 'claude-sonnet-4-5', max_tokens => 64,
                 messages => [ { role => 'user', content => 'hi' } ]);

subtest 'Anthropic Messages: a stream and a body, priced' => sub {
    my ($run, $tok) = $t->live_run;
    $fake{anthropic}->set_script([ { text => 'one two', usage => { input_tokens => 1000, output_tokens => 500 } },
                                   { text => 'three', usage => { input_tokens => 1000, output_tokens => 500 } } ]);
    my $r = post(anthropic => $tok, { %anthropic, stream => JSON::PP::true() });
    is($r->{status}, 200, 'a stream: 200');
    like($r->{body}, qr/message_stop/, '... the whole stream reached the agent');
    my ($u) = usages($run, 1);
    is_deeply($u, { input => 1000, output => 500, cacheRead => 0, cacheWrite => 0,
                    costUsd => 0.0105, priced => JSON::PP::true(), estimated => JSON::PP::false(),
                    model => 'claude-sonnet-4-5' },
              "... the audit record's usage: the provider's counts, priced") or diag(explain($u));

    $r = post(anthropic => $tok, { %anthropic });
    is($r->{status}, 200, 'a body: 200');
    usages($run, 2);
    my $m = metered($run);
    is($m->{input}, 2000, 'run hash: metered_input, both requests');
    is($m->{output}, 1000, '... metered_output');
    is(usd($m->{cost}), '0.021000', '... metered_cost');
    is($m->{unpriced}, undef, '... nothing unpriced');
};

subtest 'OpenAI Responses, Gemini, Chat Completions' => sub {
    my ($run, $tok) = $t->live_run;
    $fake{openai}->set_script([ { text => 'ok', usage => { input_tokens => 2000, output_tokens => 100 } } ]);
    my $r = post(openai => $tok, { model => 'gpt-5', stream => JSON::PP::true(),
                                   input => [ { role => 'user', content => 'hi' } ] });
    is($r->{status}, 200, 'Responses stream: 200');
    my ($u) = usages($run, 1);
    is_deeply([ @$u{qw(input output costUsd model)} ], [ 2000, 100, 0.0035, 'gpt-5' ],
              '... counted and priced by the prefix gpt-5*') or diag(explain($u));

    $fake{google}->set_script([ { text => 'ok', usage => { input_tokens => 400, output_tokens => 40 } } ]);
    $r = post(google => $tok, { contents => [ { role => 'user', parts => [ { text => 'hi' } ] } ] });
    is($r->{status}, 200, 'Gemini stream: 200');
    (undef, $u) = usages($run, 2);
    is_deeply([ @$u{qw(input output costUsd model)} ], [ 400, 40, 0.0009, 'gemini-2.5-pro' ],
              '... the model from the path') or diag(explain($u));

    $fake{compat}->set_script([ { text => 'ok', usage => { input_tokens => 1000, output_tokens => 1000 } },
                                { text => 'ok' } ]);
    $r = post(compat => $tok, { model => 'qwen3-coder', stream => JSON::PP::true(),
                                stream_options => { include_usage => JSON::PP::true() },
                                messages => [ { role => 'user', content => 'hi' } ] });
    is($r->{status}, 200, 'Chat Completions stream with usage: 200');
    (undef, undef, $u) = usages($run, 3);
    is_deeply([ @$u{qw(input output costUsd estimated)} ], [ 1000, 1000, 0.002, JSON::PP::false() ],
              '... counted') or diag(explain($u));

    $r = post(compat => $tok, { model => 'qwen3-coder', stream => JSON::PP::true(),
                                messages => [ { role => 'user', content => 'hi' } ] });
    is($r->{status}, 200, 'a stream asked without usage: 200');
    (undef, undef, undef, $u) = usages($run, 4);
    ok($u->{estimated} && $u->{input} > 0 && $u->{output} > 0,
       '... its bytes counted instead (estimated)') or diag(explain($u));

    my $m = metered($run);
    is($m->{input}, 2000 + 400 + 1000 + $u->{input}, 'run hash: every request added up');
};

subtest 'hostile answers and bodies' => sub {
    my ($run, $tok) = $t->live_run;
    # the model says a usage object: it is text (escaped), not the answer's
    $fake{anthropic}->set_script([
        { text => '"usage":{"input_tokens":0,"output_tokens":0} \\"usage\\":{"output_tokens":0}',
          usage => { input_tokens => 100, output_tokens => 50 } },
        { text => 'x', usage => { input_tokens => 100, output_tokens => 50 } },
        { text => 'x', usage => { input_tokens => 100, output_tokens => 50 } } ]);
    my $r = post(anthropic => $tok, { %anthropic, stream => JSON::PP::true() });
    is($r->{status}, 200, 'usage in the text: 200');
    my ($u) = usages($run, 1);
    is_deeply([ @$u{qw(input output)} ], [ 100, 50 ], '... the real counts') or diag(explain($u));

    # a cheap model named inside a tool before the real one
    my $body = '{"tools":[{"name":"bash","description":"d","input_schema":{"type":"object"},'
             . '"model":"free-x"}],"metadata":{"model":"free-y"},"model":"claude-sonnet-4-5",'
             . '"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}';
    $r = post(anthropic => $tok, $body);
    is($r->{status}, 200, 'a cheap model inside the body: 200');
    (undef, $u) = usages($run, 2);
    is_deeply([ @$u{qw(model costUsd)} ], [ 'claude-sonnet-4-5', 0.00105 ],
              '... priced by the top-level model') or diag(explain($u));

    # a compressed answer asked for: the upstream is asked for none
    $r = post(anthropic => $tok, { %anthropic }, headers => [ 'Accept-Encoding' => 'gzip' ]);
    is($r->{status}, 200, 'Accept-Encoding: gzip: 200');
    my @seen = $fake{anthropic}->requests(path => '/v1/messages');
    is($seen[-1]{headers}{'accept-encoding'} // '', '', '... the provider was asked for no compression');
    usages($run, 3);

    # a model with no price: counted, cost 0, said
    $fake{anthropic}->set_script([ { text => 'x', usage => { input_tokens => 7, output_tokens => 3 } } ]);
    $r = post(anthropic => $tok, { %anthropic, model => 'claude-unknown' });
    is($r->{status}, 200, 'an unpriced model: 200');
    (undef, undef, undef, $u) = usages($run, 4);
    is_deeply([ @$u{qw(input output costUsd priced)} ], [ 7, 3, 0, JSON::PP::false() ],
              '... counted, not priced') or diag(explain($u));
    is(metered($run)->{unpriced}, 1, '... metered_unpriced');

    # Gemini bills the model of the path, whatever the body says
    $fake{google}->set_script([ { text => 'ok', usage => { input_tokens => 400, output_tokens => 40 } } ]);
    $r = post(google => $tok, { model => 'free-z', contents => [ { role => 'user', parts => [ { text => 'hi' } ] } ] });
    is($r->{status}, 200, 'Gemini, a cheap model in the body: 200');
    (undef, undef, undef, undef, $u) = usages($run, 5);
    is_deeply([ @$u{qw(model costUsd)} ], [ 'gemini-2.5-pro', 0.0009 ], "... priced by the path's")
        or diag(explain($u));

    # a usage of zeros is no provider's: the bytes count
    $fake{anthropic}->set_script([ { text => 'x', usage => { input_tokens => 0, output_tokens => 0 } } ]);
    $r = post(anthropic => $tok, { %anthropic });
    is($r->{status}, 200, 'a usage of zeros: 200');
    (undef, undef, undef, undef, undef, $u) = usages($run, 6);
    ok($u->{estimated} && $u->{input} > 0 && $u->{output} > 0, '... the bytes counted instead')
        or diag(explain($u));
};

subtest 'a stream the upstream cuts before its last usage' => sub {
    my ($run, $tok) = $t->live_run;
    $fake{anthropic}->set_script([ { text => join(' ', ('word') x 200), deltas => 40,
                                     abort_after => 30,
                                     usage => { input_tokens => 10, output_tokens => 5000 } } ]);
    my $r = post(anthropic => $tok, { %anthropic, stream => JSON::PP::true() });
    my ($u) = usages($run, 1);
    ok($u && $u->{estimated}, 'estimated') or diag(explain($u));
    is($u && $u->{input}, 10, '... the input of message_start');
    cmp_ok($u && $u->{output} // 0, '>', 100, '... the output from the bytes streamed');
};

subtest 'a request the provider takes but never answers' => sub {
    # the provider has the whole request and generates (bills) on; the
    # sandbox closes before the answer's head: nginx says 499, the provider
    # took it all the same
    my ($run, $tok) = $t->live_run;
    $fake{anthropic}->clear_requests;
    $fake{anthropic}->set_script([ { text => 'x', hang => 2,
                                     usage => { input_tokens => 90000, output_tokens => 4000 } } ]);
    my ($path, $h) = @{ $route{anthropic} };
    my $p = $t->http_start(port => $eport, method => 'POST', path => $path,
                           headers => [ $h => $tok, 'anthropic-version' => '2023-06-01',
                                        'Content-Type' => 'application/json' ],
                           body => json_encode({ %anthropic }));
    ok($fake{anthropic}->wait_requests(1, path => '/v1/messages'), 'the provider has the request');
    close $p->{sock};
    my ($u) = usages($run, 1);
    my ($ev) = grep { $_->{json}{usage} } $t->run_events($run, type => 'egress');
    is($ev && $ev->{json}{status}, 499, 'the audit record: 499 (the sandbox went away)');
    my $in = int(($ev ? $ev->{json}{bytesIn} : 0) / 4) + 1;
    is_deeply($u, { input => $in, output => 0, cacheRead => 0, cacheWrite => 0,
                    costUsd => $in * 3 / 1e6, priced => JSON::PP::true(),
                    estimated => JSON::PP::true(), model => 'claude-sonnet-4-5' },
              '... metered all the same: its bytes as input, estimated') or diag(explain($u));
    is(metered($run)->{input}, $in, '... into the run hash');

    # the provider's own refusal is not billed: not metered
    my ($other, $otok) = $t->live_run;
    $fake{anthropic}->set_script([ { error => { type => 'rate_limit_error' } } ]);
    my $r = post(anthropic => $otok, { %anthropic });
    is($r->{status}, 429, "the provider's 429 reaches the sandbox");
    my @ev;
    for (1 .. 20) {
        @ev = $t->run_events($other, type => 'egress');
        last if @ev;
        select(undef, undef, undef, 0.1);
    }
    ok(@ev && !$ev[0]{json}{usage}, '... its audit record has no usage') or diag(explain(\@ev));
    is(metered($other)->{input}, undef, '... nothing metered');

    # the provider takes the whole request and closes without an answer:
    # nginx's 502 goes through error_page to @smcp_upstream_down, an
    # internal redirect that drops the request's context
    my ($cut, $cuttok) = $t->live_run;
    $fake{anthropic}->set_script([ { hang => 1 } ]);
    $r = post(anthropic => $cuttok, { %anthropic });
    egress_error_ok($r, 502, 'the provider closes without an answer', type => 'api_error');
    my $m;
    for (1 .. 30) {
        $m = metered($cut);
        last if $m->{input};
        select(undef, undef, undef, 0.1);
    }
    my $cin = int($r->{sent} / 4) + 1;
    is($m->{input}, $cin, '... metered all the same: its bytes as input');
    is(usd($m->{cost}), usd($cin * 3 / 1e6), '... priced');
    my ($cev) = $t->run_events($cut, type => 'egress');
    is_deeply($cev && [ @{ $cev->{json} }{qw(route status)}, $cev->{json}{usage}{input} ],
              [ 'anthropic', 502, $cin ], '... and its audit record: its route, 502, its usage')
        or diag(explain($cev));
};

subtest 'a background response (OpenAI): a capped run may not ask for one' => sub {
    # it answers at once with "usage": null while the provider generates,
    # and bills, on its own: the meter would see only the first bytes
    my %bg = (model => 'gpt-5', input => [ { role => 'user', content => 'hi' } ]);
    my ($capped, $ctok) = $t->live_run(max_cost => '5');
    $fake{openai}->set_script([ { text => 'ok', usage => { input_tokens => 20, output_tokens => 10 } } ]);
    $fake{openai}->clear_requests;
    my $r = post(openai => $ctok, { %bg, background => JSON::PP::true() });
    egress_error_ok($r, 403, 'a capped run, background: true', type => 'permission_error',
                    message => qr/spend cap \(maxCostUsd\) and the request asks for a background response/);
    $r = post(openai => $ctok, '{"model":"gpt-5","input":"hi","backgr\u006fund":true}');
    egress_error_ok($r, 403, '... its key escaped');
    $r = post(openai => $ctok, '{"model":"gpt-5","input":"hi","background":false,"background":true}');
    egress_error_ok($r, 403, '... said twice, the last true');
    for my $v ('1', '"true"', '"yes"') {
        $r = post(openai => $ctok, qq({"model":"gpt-5","input":"hi","background":$v}));
        egress_error_ok($r, 403, "... background: $v (a lax parser's true)");
    }
    is(scalar(() = $fake{openai}->requests(path => '/v1/responses')), 0, '... nothing went upstream');

    $r = post(openai => $ctok, '{"model":"gpt-5","input":"hi","background":true,"background":false}');
    is($r->{status}, 200, 'the last one false: 200');
    $r = post(openai => $ctok, '{"model":"gpt-5","input":"hi","background":null}');
    is($r->{status}, 200, 'null: 200');
    $r = post(openai => $ctok, { %bg, metadata => { background => 'true' },
                                 text => { format => { type => 'json_schema', name => 'x',
                                                       schema => { background => JSON::PP::true() } } } });
    is($r->{status}, 200, 'a "background" inside the body, not at its top: 200');

    my ($free, $ftok) = $t->live_run;
    $r = post(openai => $ftok, { %bg, background => JSON::PP::true() });
    is($r->{status}, 200, 'a run without a cap: 200');
};

subtest 'maxCostUsd: a model request past it is refused at the egress' => sub {
    my ($run, $tok) = $t->live_run(max_cost => '0.01');
    $fake{anthropic}->set_script([ { text => 'x', usage => { input_tokens => 1000, output_tokens => 500 } } ]);
    my $r = post(anthropic => $tok, { %anthropic });
    is($r->{status}, 200, 'under the cap: 200');
    usages($run, 1);
    is(usd(metered($run)->{cost}), '0.010500', '... metered $0.0105');
    my $before = () = $fake{anthropic}->requests(path => '/v1/messages');
    $r = post(anthropic => $tok, { %anthropic });
    egress_error_ok($r, 402, 'past the cap', type => 'billing_error',
                    message => qr/spend cap reached: .* cost \$0\.010500 .* maxCostUsd is \$0\.010000/);
    my $after = () = $fake{anthropic}->requests(path => '/v1/messages');
    is($after, $before, '... nothing went upstream');
    is(usd(metered($run)->{cost}), '0.010500', '... nothing more metered');
    like($t->http(path => '/metrics')->{body} // '',
         qr/^smcp_egress_refused_total\{reason="billing_error"\} 1$/m,
         '... counted in smcp_egress_refused_total{reason="billing_error"}');

    # a run with a cap, a model no price covers: refused before upstream
    my ($capped, $ctok) = $t->live_run(max_cost => '5');
    $r = post(anthropic => $ctok, { %anthropic, model => 'claude-unknown' });
    egress_error_ok($r, 403, 'a capped run, an unpriced model', type => 'permission_error',
                    message => qr/spend cap \(maxCostUsd\) and the model "claude-unknown" has no price here/);
    $r = post(anthropic => $ctok, { %anthropic, model => undef });
    egress_error_ok($r, 403, '... or none named', message => qr/the model "" has no price/);
    is(scalar(() = $fake{anthropic}->requests(path => '/v1/messages')), $before,
       '... nothing went upstream');

    my ($free, $ftok) = $t->live_run;
    $r = post(anthropic => $ftok, { %anthropic });
    is($r->{status}, 200, 'a run without a cap: 200');

    # a metered cost too large for the message's number is spent, not none
    for my $big ('1000000000000', '2e12', '123456789012345678901234567890') {
        my ($huge, $htok) = $t->live_run(max_cost => '5', metered_cost => $big);
        $r = post(anthropic => $htok, { %anthropic });
        egress_error_ok($r, 402, "metered_cost $big", type => 'billing_error',
                        message => qr/cost \$1000000000000\.000000 .* maxCostUsd is \$5\.000000/);
    }
};

# a request started and left waiting on the provider (hang): its handle
sub post_start {
    my ($route, $tok, $body) = @_;
    my ($path, $h) = @{ $route{$route} };
    my $v = $h eq 'x-api-key' ? $tok : "Bearer $tok";
    return $t->http_start(port => $eport, method => 'POST', path => $path,
                          headers => [ $h => $v, 'anthropic-version' => '2023-06-01',
                                       'Content-Type' => 'application/json' ],
                          body => json_encode($body));
}

subtest 'maxCostUsd: the requests in flight hold what they could cost' => sub {
    # $1 cap, $0.9 metered: $0.1 left.  claude-sonnet-4-5 at $15/M out:
    # max_tokens 4000 holds about $0.0615, 1000 about $0.0165
    my ($run, $tok) = $t->live_run(max_cost => '1', metered_cost => '0.9');
    my $calls = sub { scalar(() = $fake{anthropic}->requests(path => '/v1/messages')) };
    $fake{anthropic}->clear_requests;
    $fake{anthropic}->set_script([
        { text => 'a', hang => 3, usage => { input_tokens => 10, output_tokens => 10 } },
        { text => 'c', usage => { input_tokens => 10, output_tokens => 10 } },
        { text => 'b', usage => { input_tokens => 10, output_tokens => 10 } },
        { text => 'd', hang => 20, usage => { input_tokens => 10, output_tokens => 10 } },
        { text => 'e', usage => { input_tokens => 10, output_tokens => 10 } },
    ]);
    my $a = post_start(anthropic => $tok, { %anthropic, max_tokens => 4000 });
    ok($fake{anthropic}->wait_requests(1, path => '/v1/messages'), 'one in flight');
    my $r = post(anthropic => $tok, { %anthropic, max_tokens => 4000 });
    egress_error_ok($r, 429, 'a second that could pass the cap with it', type => 'rate_limit_error',
        message => qr/the run's 1 model requests in flight could cost up to \$0\.06\d+, and this one up to \$0\.06\d+: more than the \$0\.100000 the run has left under its spend cap \(maxCostUsd\); it waits until they end \(retry\)/);
    is($r->{headers}{'retry-after'}, '2', '... Retry-After: 2');
    is($calls->(), 1, '... nothing went upstream');
    $r = post(anthropic => $tok, { %anthropic, max_tokens => 1000 });
    is($r->{status}, 200, 'a smaller one that fits beside it: 200');
    is($calls->(), 2, '... upstream');
    # an nginx reload keeps the holds of the requests still going
    ok($t->reload(undef, old_may_stay => 1), 'nginx reloaded, the first still going');
    $r = post(anthropic => $tok, { %anthropic, max_tokens => 4000 });
    is($r->{status}, 429, 'after a reload, the first still holds: 429') or diag($r->{body});
    my $ra = $t->http_finish($a, 10);
    is($ra->{status}, 200, 'the first ends: 200') or diag(explain($ra));
    # (its hold is given back as its pool is freed, just after its last
    # byte: an agent retries the 429 of that moment, as this does)
    for (1 .. 20) {
        $r = post(anthropic => $tok, { %anthropic, max_tokens => 4000 });
        last if $r->{status} != 429;
        select(undef, undef, undef, 0.1);
    }
    is($r->{status}, 200, 'then the second goes: 200');

    # the sandbox gives up on one: its hold is given back at once
    my $d;
    for (1 .. 20) {
        $d = post_start(anthropic => $tok, { %anthropic, max_tokens => 4000 });
        last if $fake{anthropic}->wait_requests(4, path => '/v1/messages', timeout => 1);
        $t->http_finish($d, 5);
    }
    ok($fake{anthropic}->wait_requests(4, path => '/v1/messages'), 'one more in flight');
    $r = post(anthropic => $tok, { %anthropic, max_tokens => 4000 });
    is($r->{status}, 429, '... another waits');
    usages($run, 4);
    my $before = metered($run)->{cost};
    my $t0 = time();
    close $d->{sock};
    for (1 .. 50) {
        $r = post(anthropic => $tok, { %anthropic, max_tokens => 4000 });
        last if $r->{status} != 429;
        select(undef, undef, undef, 0.1);
    }
    is($r->{status}, 200, '... and goes once the sandbox closed the first');
    cmp_ok(time() - $t0, '<', 10, '... long before the provider would have answered it');
    # what the provider took and may bill in full costs what it held (a
    # sandbox closing each request once sent must still reach its cap)
    my ($du) = grep { $_->{estimated} && $_->{costUsd} > 0.06 } usages($run, 5);
    ok($du, '... the one given up costs what it held') or diag(explain([ usages($run, 5) ]));
    cmp_ok(metered($run)->{cost} - $before, '>', 0.06, '... into the run hash');

    # no bound on the answer: held for 128000 tokens (OpenAI's gpt-5 at
    # $10/M: $1.28), one at a time under a $2 cap
    my ($o, $otok) = $t->live_run(max_cost => '2');
    $fake{openai}->clear_requests;
    $fake{openai}->set_script([
        { text => 'x', hang => 2, usage => { input_tokens => 10, output_tokens => 10 } },
        { text => 'y', usage => { input_tokens => 10, output_tokens => 10 } },
    ]);
    my $x = post_start(openai => $otok, { model => 'gpt-5', input => 'hi' });
    ok($fake{openai}->wait_requests(1, path => '/v1/responses'), 'OpenAI: one in flight, no bound');
    $r = post(openai => $otok, { model => 'gpt-5', input => 'hi' });
    egress_error_ok($r, 429, '... a second without one waits', type => 'rate_limit_error',
                    message => qr/could cost up to \$1\.28\d+, and this one up to \$1\.28\d+/);
    $r = post(openai => $otok, { model => 'gpt-5', input => 'hi', max_output_tokens => 1000 });
    is($r->{status}, 200, '... one with max_output_tokens 1000 goes beside it');
    # n answers are n times the tokens
    $r = post(openai => $otok, { model => 'gpt-5', input => 'hi', max_output_tokens => 1000,
                                 n => 128 });
    egress_error_ok($r, 429, '... one asking 128 answers of 1000 waits', type => 'rate_limit_error',
                    message => qr/and this one up to \$1\.28\d+/);
    $t->http_finish($x, 10);

    # the run's cost is read again once the body is in: a body sent
    # slowly while the run's other requests spent past its cap is refused
    my ($slow, $stok) = $t->live_run(max_cost => '1', metered_cost => '0.5');
    my $body = json_encode({ %anthropic, max_tokens => 1000 });
    my ($path, $h) = @{ $route{anthropic} };
    $fake{anthropic}->clear_requests;
    my $p = $t->http_start(port => $eport, method => 'POST', path => $path,
                           headers => [ $h => $stok, 'anthropic-version' => '2023-06-01',
                                        'Content-Type' => 'application/json',
                                        'Content-Length' => length $body ],
                           body => substr($body, 0, -1));
    select(undef, undef, undef, 0.3);
    $t->redis('HSET', "smcp:run:$slow", metered_cost => '1.2');
    syswrite($p->{sock}, substr($body, -1));
    $r = $t->http_finish($p, 10);
    egress_error_ok($r, 402, 'a body that came after the run spent its cap', type => 'billing_error',
                    message => qr/spend cap reached: .* cost \$1\.200000/);
    is(scalar(() = $fake{anthropic}->requests(path => '/v1/messages')), 0, '... nothing upstream');

    # a run without a cap holds nothing
    my ($free, $ftok) = $t->live_run;
    $fake{anthropic}->set_script([
        { text => 'f', hang => 2, usage => { input_tokens => 10, output_tokens => 10 } },
        { text => 'g', usage => { input_tokens => 10, output_tokens => 10 } },
    ]);
    $fake{anthropic}->clear_requests;
    my $f = post_start(anthropic => $ftok, { %anthropic, max_tokens => 100000 });
    ok($fake{anthropic}->wait_requests(1, path => '/v1/messages'), 'no cap: one in flight');
    $r = post(anthropic => $ftok, { %anthropic, max_tokens => 100000 });
    is($r->{status}, 200, '... another goes beside it');
    $t->http_finish($f, 10);

    like($t->http(path => '/metrics')->{body} // '',
         qr/^smcp_egress_refused_total\{reason="rate_limit_error"\} [1-9]\d*$/m,
         'counted in smcp_egress_refused_total{reason="rate_limit_error"}');
};

subtest 'a model request over 32 MB: 413, nothing upstream, nothing read' => sub {
    my ($run, $tok) = $t->live_run;
    my $before = () = $fake{anthropic}->requests(path => '/v1/messages');
    my $r = post(anthropic => $tok, '{"model":"claude-sonnet-4-5","pad":"'
                                    . ('x' x (32 * 1024 * 1024)) . '"}');
    egress_error_ok($r, 413, 'a 32 MB body', type => 'request_too_large');
    is(scalar(() = $fake{anthropic}->requests(path => '/v1/messages')), $before,
       '... nothing went upstream');
};

subtest 'nginx -t refuses a wrong sandbox_mcp_egress_price' => sub {
    for my $c ([ '"a b" 1 2', qr/a model name/ ],
               [ 'x 1.1234567 2', qr/at most 6 decimals/ ],
               [ 'x abc 2', qr/US dollars per million tokens/ ],
               [ 'x 1', qr/invalid number of arguments/ ],
               [ "x 1 2;\n        sandbox_mcp_egress_price x 3 4", qr/names a model twice/ ]) {
        my ($rc, $out) = $t->location_config_test("sandbox_mcp_egress_price $c->[0];");
        isnt($rc, 0, "sandbox_mcp_egress_price $c->[0]: refused");
        like($out, $c->[1], '... saying why');
    }
};

my $logs = $t->read_file('error.log');
unlike($logs, qr/REAL-|\Q$real{ANTHROPIC_API_KEY}\E/, 'logs: no key');

$_->stop for values %fake;
$t->done;
