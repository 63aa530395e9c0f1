package SMCP::Events;

# What a run's events say, for assertions and diagnostics, core Perl only.
# Three shapes of the same events:
#
#   - the JSON lines a sandbox prints: OpenCode's (step_start, tool_use,
#     text, step_finish, error, ...) and the entry script's (type smcp:
#     clone, agent_start, agent_exit, diff);
#   - opencode_get_events' events: {type agent|lifecycle|log|egress, data
#     (decoded), time};
#   - the stored entries of run:{id}:events ($t->run_events): {id, type,
#     data (text), ts, dts, json (data decoded)}.
#
#   use SMCP::Events qw(kinds agent_data step_totals describe_events);
#   is_deeply([kinds(@json)], ['smcp:agent_start', 'tool_use:write', ...]);
#   check_events_exact(\@stored, $run_hash, $what, agent => [...]);

use strict;
use warnings;

use Exporter qw(import);
use Test::More ();

our @EXPORT_OK = qw(kinds agent_data step_totals describe_events check_events_exact);
our %EXPORT_TAGS = (all => \@EXPORT_OK);

# kinds(@json) -> a word per event: tool_use:write, text, smcp:agent_exit,
# ... ('(not json)' for what is not a decoded object)
sub kinds {
    return map {
        my $j = $_;
        !ref $j ? '(not json)'
        : ($j->{type} // '') eq 'smcp' ? 'smcp:' . ($j->{step} // '?')
        : ($j->{type} // '') eq 'tool_use' ? 'tool_use:' . ($j->{part}{tool} // '?')
        : ($j->{type} // '?')
    } @_;
}

# agent_data(@events) -> the data of opencode_get_events' agent events
# (OpenCode's own JSON lines), in order
sub agent_data {
    return map { $_->{data} } grep { ($_->{type} // '') eq 'agent' } @_;
}

# step_totals(@json) -> (input tokens, output tokens, cost) summed over the
# step_finish events: what a run's outcome must count
sub step_totals {
    my ($in, $out, $cost) = (0, 0, 0);
    for my $j (grep { ref $_ && ($_->{type} // '') eq 'step_finish' } @_) {
        $in += $j->{part}{tokens}{input} // 0;
        $out += $j->{part}{tokens}{output} // 0;
        $cost += $j->{part}{cost} // 0;
    }
    return ($in, $out, $cost);
}

# describe_events(@stored) -> one line per stored event, for diag: type,
# Docker timestamp, size and the start of the data (bytes outside
# printable ASCII escaped)
sub describe_events {
    return join "\n", map {
        my $d = $_->{data} // '';
        sprintf('%s %s %dB %s', $_->{type} // '?', $_->{dts} // '-', length($d),
                substr($d, 0, 60) =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ger)
    } @_;
}

# check_events_exact(\@stored, $run_hash, $what, agent => [kinds],
#   lifecycle => [...], ticks => 1): the stored events of a finished run
#   are exactly what its script implies (none lost, none twice), in log
#   order, and the outcome ($run_hash: tokens, cost) counts each
#   step_finish once.  Its log lines: none, or with ticks => 1 the
#   numbered lines tick-1, tick-2, ... a gate step prints while it waits
#   (SMCP::Stack::gate_step), every one once, in order, none missing.
sub check_events_exact {
    my ($st, $h, $what, %o) = @_;
    my @st = @$st;
    my @agent = grep { $_->{type} eq 'agent' } @st;
    Test::More::is_deeply([kinds(map { $_->{json} } @agent)], $o{agent},
        "$what: the agent events are exactly the script's (none lost, none twice)")
        or Test::More::diag(join ' ', kinds(map { $_->{json} } @agent));
    my @lc = map { my $j = $_->{json};
                   $j->{step} ? "smcp:$j->{step}" : $j->{status} ? "status:$j->{status}" : () }
             grep { $_->{type} eq 'lifecycle' } @st;
    Test::More::is_deeply(\@lc, $o{lifecycle},
        "$what: lifecycle " . join(', ', map { s/^\w+://r } @{ $o{lifecycle} }) . ' (once each)')
        or Test::More::diag(join ' ', @lc);
    my (%seen, @dup);
    for my $e (grep { defined $_->{dts} } @st) {
        push @dup, "$e->{dts} $e->{data}" if $seen{"$e->{dts}\0$e->{data}"}++;
    }
    Test::More::is(scalar(@dup), 0, "$what: no two stored events with the same dts and data")
        or Test::More::diag(join "\n", @dup);
    my @dts = map { $_->{dts} } grep { defined $_->{dts} } @st;
    Test::More::is_deeply(\@dts, [sort @dts], "$what: container lines stored in log order");
    my @log = map { $_->{data} } grep { $_->{type} eq 'log' } @st;
    if ($o{ticks}) {
        Test::More::ok(@log && Test::More::eq_array(\@log, [map { "tick-$_" } 1 .. @log]),
            "$what: the log lines are tick-1 .. tick-" . scalar(@log)
            . ' (none lost, none twice, in order)')
            or Test::More::diag(join ' ', @log);
    } else {
        Test::More::is(scalar(@log), 0, "$what: no stray log lines");
    }
    my ($in, $out, $cost) = step_totals(map { $_->{json} } @agent);
    Test::More::is($h->{tokens_input}, $in, "$what: tokens_input = the sum over the stored step_finish events");
    Test::More::is($h->{tokens_output}, $out, "$what: tokens_output likewise");
    Test::More::ok(abs(($h->{cost} // 0) - $cost) < 1e-5, "$what: cost likewise ($h->{cost} vs $cost)");
}

1;
