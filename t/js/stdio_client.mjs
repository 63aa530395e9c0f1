// The official MCP SDK client over stdio, as Claude Desktop is to the
// servers of its claude_desktop_config.json: it starts the entry's
// command with its args and env, then speaks MCP on the program's
// standard input and output: initialize, tools/list, one tools/call.
//
//   node t/js/stdio_client.mjs ENTRY_JSON TOOL [ARGUMENTS_JSON]
//
// ENTRY_JSON is one mcpServers entry ({command, args, env}); the program
// gets this process's environment with the entry's env over it. One JSON
// line per check, then {"done": true} (t/lib/js_checks).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { check, assert, report, script } from './lib/checks.mjs';

const [entryJson, tool, argsJson = '{}'] = process.argv.slice(2);
if (!entryJson || !tool) {
    console.error('usage: node stdio_client.mjs ENTRY_JSON TOOL [ARGUMENTS_JSON]');
    process.exit(2);
}
const entry = JSON.parse(entryJson);
const json = (x) => JSON.stringify(x);

// connecting may wait for a person to sign in in a browser (mcp-remote's
// OAuth): minutes, not the SDK's default minute
const CONNECT_MS = Number(process.env.SMCP_CONNECT_MS || 150000);

const TOOLS = ['opencode_cancel_run', 'opencode_get_diff', 'opencode_get_events',
               'opencode_get_result', 'opencode_list_runs', 'opencode_list_sessions',
               'opencode_pick_attempt', 'opencode_run_task', 'opencode_send_message'];

let stderr = '';
const transport = new StdioClientTransport({
    command: entry.command,
    args: entry.args ?? [],
    env: { ...process.env, ...(entry.env ?? {}) },
    stderr: 'pipe',
});
transport.stderr?.on('data', (d) => { stderr += d; });
const client = new Client({ name: 'smcp-stdio-client', version: '1.0.0' });

let ok = true;
await script(async () => {
    ok = (await check('initialize over stdio', async () => {
        await client.connect(transport, { timeout: CONNECT_MS });
        const info = client.getServerVersion();
        assert(info?.name, json(info));
        return `${info.name} ${info.version}`;
    })) && ok;
    ok = (await check('tools/list: the nine tools', async () => {
        const r = await client.listTools();
        const names = r.tools.map((t) => t.name).sort();
        assert(json(names) === json(TOOLS), json(names));
        return names.join(' ');
    })) && ok;
    ok = (await check(`tools/call ${tool}`, async () => {
        const r = await client.callTool({ name: tool, arguments: JSON.parse(argsJson) });
        assert(!r.isError && r.structuredContent, json(r));
        return json(r.structuredContent).slice(0, 200);
    })) && ok;
}, async (threw) => {
    await client.close().catch(() => {});
    // the program's log, for a failure's diagnosis
    if (!ok || threw) report('the stdio server\'s log', false, stderr.slice(-4000));
});
