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

use strict;
use warnings;

use Exporter qw(import);

our @EXPORT_OK = qw(kinds agent_data step_totals describe_events);
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

1;
