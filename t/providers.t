#!/usr/bin/env perl
# Every provider proven: a full run through each egress route that is not
# Anthropic's (t/runner.t and t/opencode_sandbox.t run that one), with the
# real OpenCode in a sandbox started by the runner, the real egress proxy
# (nginx with the module, the routes egress-routes.sh renders), and a
# scripted fake speaking the provider's own wire protocol:
#
#   openai/gpt-5               /openai/ -> POST /v1/responses (Responses API
#                              events), Authorization: Bearer KEY
#   azure/gpt-5                /azure/ -> POST /openai/v1/responses (Azure's
#                              v1 API, the deployment as the model), api-key
#   google/gemini-2.5-pro      /google/ -> POST /v1beta/models/M:
#                              streamGenerateContent?alt=sse, x-goog-api-key
#   compat/qwen3-coder         /compat/ -> POST /v1/chat/completions
#   cloudflare-ai-gateway/anthropic/claude-sonnet-4-5,
#   cloudflare-ai-gateway/openai/gpt-5,
#   cloudflare-ai-gateway/google-ai-studio/gemini-2.5-pro
#                              /cloudflare/ -> the gateway
#                              (/v1/ACCOUNT/GATEWAY/VENDOR/...), the gateway
#                              token in cf-aig-authorization, set up as
#                              Cloudflare's guide for OpenCode does it
#
# Each run: the model has OpenCode run bash twice (write a file, read it
# back and dump the environment into the volume), then answers; the run
# completes with that answer.  Checked: the fake received the REAL key on
# every request and never the run token; nothing else credential-like went
# upstream; the sandbox never held a real key (container environment, the
# whole session volume, the run's events); the run's events hold both tool
# calls and the text, exactly once each, and the tokens and cost stored
# are the sums of its step_finish events; the egress audit names the route
# and the path of every model request.  A vendor the gateway set-up does
# not know fails the run with a message saying so.
#
# Needs root, Docker, `make` (module, runner) and redis-server; the sandbox
# image is built on first use (runner/sandbox/build-image;
# SMCP_SANDBOX_IMAGE picks its tag).  Under CI=true a missing prerequisite
# is a failure.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP;
use List::Util qw(sum0);
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(docker);
use SMCP::Fakes;
use SMCP::Stack;
use SMCP::Test qw(json_encode json_decode rhex wait_until);

my $T0 = time();

my %real = (
    OPENAI_API_KEY       => 'sk-openai-REAL-' . rhex(),
    AZURE_OPENAI_API_KEY => 'azure-REAL-' . rhex(),
    GOOGLE_API_KEY       => 'goog-REAL-' . rhex(),
    CF_AIG_TOKEN         => 'cfaig-REAL-' . rhex(),
    COMPAT_API_KEY       => 'sk-compat-REAL-' . rhex(),
);
my ($ACCOUNT, $GATEWAY) = ('0123456789abcdef' . rhex(8), 'smcp-gw');

##############################################################################
# the fakes: one script for all, picked by the SCENARIO marker of the run's
# task, the step by the tool results in the conversation (a retried
# request lands on the same step)

# tool results in a request, whatever the protocol: Responses
# function_call_output items, chat `tool` messages, Gemini functionResponse
# parts, Anthropic tool_result blocks
sub tool_results {
    my ($j) = @_;
    my $n = 0;
    for my $x (@{ $j->{input} || [] }) {
        $n++ if ref $x eq 'HASH' && ($x->{type} // '') eq 'function_call_output';
    }
    for my $m (@{ $j->{messages} || [] }) {
        $n++ if ($m->{role} // '') eq 'tool';
        $n += grep { ref $_ eq 'HASH' && ($_->{type} // '') eq 'tool_result' } @{ $m->{content} }
            if ref $m->{content} eq 'ARRAY';
    }
    for my $c (@{ $j->{contents} || [] }) {
        $n += grep { $_->{functionResponse} } @{ $c->{parts} || [] };
    }
    return $n;
}

sub steps {
    my ($mark) = @_;
    my $f = lc $mark;
    return (
        { tool_use => { name => 'bash', input => {
            command => "printf 'made through %s\\n' $mark > proof-$f.txt",
            description => 'Write the proof file' } } },
        { tool_use => { name => 'bash', input => {
            command => "cat proof-$f.txt && env > /workspace/.oc/env-$f"
                     . " && grep -c '^SMCP_RUN_TOKEN=' /workspace/.oc/env-$f",
            description => 'Read it back, keep the environment' } } },
        { text => "Done through $mark." },
    );
}

my $dispatch = sub {
    my ($j, $req) = @_;
    my ($mark) = ($req->{body} // '') =~ /\bSCENARIO-([A-Z0-9]+)/
        or return { text => 'Providers test' };
    my @s = steps($mark);
    my $n = tool_results($j);
    return $s[$n > $#s ? $#s : $n];
};

my %fake = (
    openai     => SMCP::Fakes::start_openai(key => $real{OPENAI_API_KEY}, script => [$dispatch]),
    azure      => SMCP::Fakes::start_azure(key => $real{AZURE_OPENAI_API_KEY}, script => [$dispatch]),
    google     => SMCP::Fakes::start_gemini(key => $real{GOOGLE_API_KEY}, script => [$dispatch]),
    compat     => SMCP::Fakes::start_openai(key => $real{COMPAT_API_KEY}, script => [$dispatch]),
    cloudflare => SMCP::Fakes::start_cloudflare(token => $real{CF_AIG_TOKEN}, account => $ACCOUNT,
                                                gateway => $GATEWAY, script => [$dispatch]),
);

my $cf = "/v1/$ACCOUNT/$GATEWAY";
my @CASES = (
    { mark => 'OPENAI', model => 'openai/gpt-5', route => 'openai',
      audit => '/openai/v1/responses', upstream => '/v1/responses',
      header => [authorization => "Bearer $real{OPENAI_API_KEY}"] },
    { mark => 'AZURE', model => 'azure/gpt-5', route => 'azure',
      audit => '/azure/openai/v1/responses', upstream => '/openai/v1/responses',
      header => ['api-key' => $real{AZURE_OPENAI_API_KEY}] },
    { mark => 'GEMINI', model => 'google/gemini-2.5-pro', route => 'google',
      audit => '/google/v1beta/models/gemini-2.5-pro:streamGenerateContent',
      upstream => '/v1beta/models/gemini-2.5-pro:streamGenerateContent', query => 'alt=sse',
      header => ['x-goog-api-key' => $real{GOOGLE_API_KEY}] },
    { mark => 'COMPAT', model => 'compat/qwen3-coder', route => 'compat', free => 1,
      audit => '/compat/v1/chat/completions', upstream => '/v1/chat/completions',
      header => [authorization => "Bearer $real{COMPAT_API_KEY}"] },
    { mark => 'CFANTHROPIC', model => 'cloudflare-ai-gateway/anthropic/claude-sonnet-4-5',
      route => 'cloudflare', audit => '/cloudflare/anthropic/v1/messages',
      upstream => "$cf/anthropic/v1/messages", oc => ['anthropic', 'cloudflare/anthropic/v1'],
      header => ['cf-aig-authorization' => "Bearer $real{CF_AIG_TOKEN}"] },
    { mark => 'CFOPENAI', model => 'cloudflare-ai-gateway/openai/gpt-5',
      route => 'cloudflare', audit => '/cloudflare/openai/responses',
      upstream => "$cf/openai/responses", oc => ['openai', 'cloudflare/openai'],
      header => ['cf-aig-authorization' => "Bearer $real{CF_AIG_TOKEN}"] },
    { mark => 'CFGEMINI', model => 'cloudflare-ai-gateway/google-ai-studio/gemini-2.5-pro',
      route => 'cloudflare',
      audit => '/cloudflare/google-ai-studio/v1beta/models/gemini-2.5-pro:streamGenerateContent',
      upstream => "$cf/google-ai-studio/v1beta/models/gemini-2.5-pro:streamGenerateContent",
      query => 'alt=sse', oc => ['google', 'cloudflare/google-ai-studio/v1beta'],
      header => ['cf-aig-authorization' => "Bearer $real{CF_AIG_TOKEN}"] },
);

my $s = SMCP::Stack->new(egress_env => {
    %real,
    OPENAI_BASE_URL       => $fake{openai}->url,
    AZURE_OPENAI_BASE_URL => $fake{azure}->url,
    GOOGLE_BASE_URL       => $fake{google}->url,
    COMPAT_BASE_URL       => $fake{compat}->url,
    CF_AIG_BASE_URL       => $fake{cloudflare}->base_url,
});
my $t = $s->t;
my $runner = $s->start_runner(concurrency => 2);
ok($s->runner_alive($runner), 'the runner is up');

my $secrets = join '|', map { quotemeta } values %real, $s->real->{ANTHROPIC_API_KEY};
my $SECRET = qr/$secrets/;

sub diag_run { $s->diag_run($_[0], $runner) }

# a command in a throw-away container on a session volume (read-only, no
# network): (exit code, stdout)
sub on_volume {
    my ($session, @cmd) = @_;
    my ($rc, $out) = docker({ timeout => 120 }, 'run', '--rm', '--network', 'none',
        '--user', '1000:1000', '-v', "smcp-$session:/workspace:ro",
        '--entrypoint', $cmd[0], $s->image, @cmd[1 .. $#cmd]);
    return ($rc, $out);
}

##############################################################################
# the runs: all queued at once, two at a time in sandboxes

my (%run, %env_seen);
for my $c (@CASES) {
    my $r = $s->run_task(task => "SCENARIO-$c->{mark}: write proof-" . lc($c->{mark})
                                 . '.txt with bash, read it back, report.',
                         model => $c->{model}, title => "providers $c->{mark}");
    $run{ $c->{mark} } = $r;
}
my $bad = $s->run_task(task => 'SCENARIO-WORKERSAI: anything',
                       model => 'cloudflare-ai-gateway/workers-ai/@cf/meta/llama-3.1-8b-instruct',
                       title => 'providers unsupported');

# the environment each sandbox was started with, caught while it lives
my %res;
wait_until(600, sub {
    for my $c (@CASES) {
        my $id = $run{ $c->{mark} }{runId};
        next if $res{$id};
        if (!defined $env_seen{$id}) {
            for my $cid ($s->run_containers($id)) {
                my ($rc, $out) = docker('inspect', '--format', '{{json .Config.Env}}', $cid);
                $env_seen{$id} = $out if $rc == 0 && $out =~ /SMCP_RUN_TOKEN/;
            }
        }
        my $r = $s->result($id);
        $res{$id} = $r if SMCP::Stack::terminal($r->{status});
    }
    return keys %res == @CASES;
}, 0.3);

for my $c (@CASES) {
    my $m = $c->{mark};
    my $id = $run{$m}{runId};
    my $ses = $run{$m}{sessionId};
    subtest "$c->{model} through /$c->{route}/" => sub {
        my $res = $res{$id} // $s->wait_done($id, 10);
        is($res->{status}, 'completed', 'the run completed') or diag_run($id);
        is($res->{result}, "Done through $m.", 'result: the model\'s final text');
        is($res->{exitCode}, 0, 'exitCode 0');
        is($res->{error}, undef, 'no error') or diag($res->{error});

        # the run's events: two bash calls and the text, once each
        my @agent = map { $_->{data} } grep { ($_->{type} // '') eq 'agent' } $s->events($id);
        my @tu = grep { ($_->{type} // '') eq 'tool_use' } @agent;
        is_deeply([map { "$_->{part}{tool}:$_->{part}{state}{status}" } @tu],
                  ['bash:completed', 'bash:completed'], 'events: two bash tool calls, completed')
            or diag(json_encode(\@tu));
        like($tu[0] && $tu[0]{part}{state}{input}{command} // '', qr/proof-\L$m\E\.txt/,
             'events: the first writes the proof file');
        is($tu[1] && $tu[1]{part}{state}{output}, "made through $m\n1\n",
           'events: the second read it back (the sandbox ran the first)');
        my ($text) = grep { ($_->{type} // '') eq 'text' } @agent;
        is($text && $text->{part}{text}, "Done through $m.", 'events: the text');
        $s->check_events_exact($id, $m, agent => [
            ('step_start', 'tool_use:bash', 'step_finish') x 2, 'step_start', 'text', 'step_finish']);
        my $h = $s->run_hash($id);
        ok($h->{tokens_input} > 0 && $h->{tokens_output} > 0,
           "tokens recorded ($h->{tokens_input} in, $h->{tokens_output} out)");
        if ($c->{free}) {
            ok(defined $h->{cost} && $h->{cost} == 0,
               'cost recorded: 0 (a model OpenCode has no price for)');
        } else {
            ok(($h->{cost} // 0) > 0, "cost recorded ($h->{cost})");
        }

        # the provider's side: every request with the real credential
        my $f = $fake{ $c->{route} };
        my @req = grep { ($_->{body} // '') =~ /\bSCENARIO-$m\b/ } $f->requests;
        is(scalar(@req), 3, 'the fake got 3 requests (bash, bash, answer)')
            or diag(join "\n", map { "$_->{method} $_->{target} $_->{status}" } @req);
        is_deeply([map { $_->{path} } @req], [($c->{upstream}) x 3],
                  "upstream path $c->{upstream}");
        is_deeply([map { $_->{query} // '' } @req], [($c->{query} // '') x 3],
                  'upstream query: ' . ($c->{query} // 'none'));
        is_deeply([map { $_->{status} } @req], [200, 200, 200], 'the fake answered 200');
        my ($hn, $hv) = @{ $c->{header} };
        is(scalar(grep { ($_->{headers}{$hn} // '') eq $hv } @req), 3,
           "the fake saw the real credential in $hn every time");
        my @with_tok = grep { my $x = json_encode($_->{header_list}) . ($_->{body} // '');
                              $x =~ /eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\./ } @req;
        is(scalar(@with_tok), 0, 'no run token (no JWT) upstream, in a header or a body');
        my @cred = sort grep { $_ ne $hn && /^(authorization|x-api-key|api-key|x-goog-api-key|cf-aig-authorization)$/ }
                   map { keys %{ $_->{headers} } } @req;
        is_deeply(\@cred, [], 'no other credential header upstream') or diag("@cred");
        like(json_encode($req[2] && $req[2]{json}), qr/made through $m/,
             'the last request carried the tool output back (the protocol round trip)');

        # the egress audit: one granted event per model request, on the route
        my @eg = map { $_->{json} } grep { ($_->{type} // '') eq 'egress' } $s->stored_events($id);
        is_deeply([map { "$_->{route} $_->{path} $_->{status}" . ($_->{granted} ? '' : ' refused') } @eg],
                  [("$c->{route} $c->{audit} 200") x 3],
                  "audit: 3 requests on route $c->{route}, $c->{audit}, 200")
            or diag(json_encode(\@eg));

        # the sandbox never held a real key
        my $env = $env_seen{$id};
        ok(defined $env, 'the container\'s environment was seen while it ran');
        like($env // '', qr/"SMCP_RUN_TOKEN=eyJ/, 'container env: the run token');
        unlike($env // '', $SECRET, 'container env: no real key');
        my ($rc, $dump) = on_volume($ses, 'cat', "/workspace/.oc/env-\L$m");
        like($dump, qr/^SMCP_RUN_TOKEN=eyJ/m, 'the env dumped inside the run: the run token');
        unlike($dump, $SECRET, '... no real key');
        my ($rc2, $tar) = on_volume($ses, 'tar', '-C', '/workspace', '-cf', '-', '.');
        ok($rc2 == 0 && length($tar) > 10000, 'the session volume read back ('
                                             . length($tar) . ' bytes)');
        unlike($tar, $SECRET, 'volume: no real key anywhere');
        my $all = join "\n", map { $_->{data} // '' } $s->stored_events($id);
        unlike($all, $SECRET, 'events: no real key');

        # what OpenCode was told (the gateway: the vendor's own provider)
        if (my $oc = $c->{oc}) {
            my (undef, $cfg) = on_volume($ses, 'cat', '/workspace/.oc/config/opencode/opencode.json');
            my $j = json_decode($cfg) // {};
            my ($model) = $c->{model} =~ m{^[^/]+/[^/]+/(.+)$};
            is($j->{model}, "$oc->[0]/$model", "OpenCode's model: $oc->[0]/$model");
            is($j->{provider}{ $oc->[0] }{options}{baseURL}, $s->egress_url . "/$oc->[1]",
               "OpenCode's $oc->[0] base URL: the egress's /$oc->[1]");
        }
    };
}

subtest 'a gateway vendor the sandbox cannot set up: the run fails saying so' => sub {
    my $res = $s->wait_done($bad->{runId}, 300);
    is($res->{status}, 'failed', 'failed');
    like($res->{error} // '', qr/workers-ai.*not supported.*anthropic, openai, google-ai-studio/,
         'the error names the vendor and what is supported') or diag($res->{error});
    my @eg = grep { ($_->{type} // '') eq 'egress' } $s->stored_events($bad->{runId});
    is(scalar(@eg), 0, 'nothing went through the egress');
};

##############################################################################

ok($s->runner_alive($runner), 'the runner is still up');
my $log = $s->runner_log($runner);
unlike($log, $SECRET, 'the runner log holds no real credential');
unlike($t->read_file('error.log') . $t->read_file('access.log'), $SECRET,
       'nginx\'s logs hold no real credential');

$s->stop_runner($runner, 'TERM');
$_->stop for values %fake;
diag(sprintf('timing: %.1f s in all', time() - $T0));
$s->done;
