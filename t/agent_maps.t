#!/usr/bin/env perl
# The maps of the agents besides OpenCode (runner/sandbox/agents/*.jq,
# issue 26, point 3) on hostile lines, run as the entry script runs them
# (jq -ncR --unbuffered, the sandbox image's jq): what Claude Code or Codex
# prints is the agent's to write.  Non-JSON, NUL bytes, JSON that is not an
# object, wrong types, a 2 MB string, 20,000-deep nesting, absurd token
# counts: the map exits 0, prints objects only, each a line within the
# runner's --max-line (256 KiB), token counts within what the runner takes;
# and a real line still comes through after them.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP ();
use Test::More;

use SMCP::Docker qw(ensure_docker ensure_sandbox_image);
use SMCP::Test qw(run_cmd);

ensure_docker(root => 1);
my ($image) = ensure_sandbox_image();

my $big = 'x' x 2_000_000;
my $deep = ('[' x 20000) . (']' x 20000);
my @hostile = (
    "not json at all",
    "{\"type\":\"text\x00\",\"nul\":\"a\x00b\"}",
    '[1,2,3]', '"a string"', '42', 'null', '{', '}{',
    $deep,
    qq({"type":"assistant","message":"not an object"}),
    qq({"type":"assistant","message":{"id":7,"content":"x","usage":[]}}),
    qq({"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"$big"}],"usage":{"input_tokens":1e300,"output_tokens":-5}}}),
    qq({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t9","content":"$big"}]}}),
    qq({"type":"result","subtype":"success","model_usage_since_last_result":{"m":{"inputTokens":1e300,"costUSD":1e300}}}),
    qq({"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"$big"}}),
    qq({"type":"item.completed","item":{"id":"i2","type":"command_execution","command":"$big","aggregated_output":"$big","exit_code":"x","status":"completed"}}),
    qq({"type":"turn.completed","usage":{"input_tokens":1e300,"cached_input_tokens":-1,"output_tokens":"many"}}),
    qq({"type":"thread.started","thread_id":{"x":1}}),
);
my %real = (
    'claude-code' => [ '{"type":"system","subtype":"init","session_id":"abc-123"}',
                       '{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"still here"}],"usage":{"input_tokens":3}},"session_id":"abc-123"}' ],
    codex => [ '{"type":"thread.started","thread_id":"abc-123"}',
               '{"type":"item.completed","item":{"id":"i9","type":"agent_message","text":"still here"}}' ],
);

for my $agent (qw(claude-code codex)) {
    my $in = join("\n", @hostile, @{ $real{$agent} }) . "\n";
    my ($rc, $out, $err) = run_cmd([ 'docker', 'run', '--rm', '-i', '--network', 'none',
        '--user', '1000:1000', '--read-only', '--cap-drop', 'ALL',
        '--entrypoint', 'jq', $image, '-ncR', '--unbuffered', '--argjson', 'base', 'null',
        '-f', "/usr/local/lib/smcp/agents/$agent.jq" ], stdin => $in, timeout => 300);
    is($rc, 0, "$agent: the map exits 0 on hostile lines") or diag($err);
    my @lines = split /\n/, $out;
    my @bad = grep { !(eval { ref JSON::PP->new->decode($_) } // '') eq 'HASH' } @lines;
    ok(@lines && !@bad, "$agent: every line an object") or diag(substr("@bad", 0, 500));
    my @long = grep { length > 256 * 1024 } @lines;
    ok(!@long, "$agent: every line within 256 KiB") or diag(join ' ', map { length } @long);
    my @ev = map { JSON::PP->new->decode($_) } @lines;
    my @tok = grep { ($_->{type} // '') eq 'step_finish' } @ev;
    ok(!grep({ my $t = $_->{part}{tokens} || {};
               grep { !defined($_) || $_ !~ /^\d+$/ || $_ > 1e15 }
                   map { $t->{$_} } qw(input output reasoning) } @tok),
       "$agent: token counts whole and bounded");
    ok(!grep({ my $c = $_->{part}{cost} // 0; $c < 0 || $c > 1000 } @tok),
       "$agent: costs bounded");
    my ($last) = grep { ($_->{type} // '') eq 'text' && ($_->{part}{text} // '') eq 'still here' } @ev;
    ok($last, "$agent: a real line after them still comes through");
    is($last && $last->{sessionID}, 'abc-123', '... with its session id');
}

done_testing;
