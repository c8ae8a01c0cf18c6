import json, statistics as st, sys
out=sys.argv[1]; R=int(sys.argv[2])
rows = [
 ('engine', 'prefill 512 tokens, tok/s', lambda e: e['prefill']['tok_s'], True),
 ('engine', 'decode 1 stream, tok/s', lambda e: e['decode_1']['tok_s'], True),
 ('engine', 'decode 8 streams, tok/s', lambda e: e['decode_8']['tok_s'], True),
 ('engine', 'decode 32 streams, tok/s', lambda e: e['decode_32']['tok_s'], True),
 ('engine', 'decode at 4096 context, tok/s', lambda e: e['decode_long_context']['tok_s'], True),
 ('serving', 'output tok/s', lambda s: s['output_throughput'], True),
 ('serving', 'TTFT p50 ms', lambda s: s['ttft_ms']['p50'], False),
 ('serving', 'TTFT p99 ms', lambda s: s['ttft_ms']['p99'], False),
 ('serving', 'TPOT p50 ms', lambda s: s['tpot_ms']['p50'], False),
 ('serving', 'ITL p50 ms', lambda s: s['itl_ms']['p50'], False),
 ('serving', 'ITL p99 ms', lambda s: s['itl_ms']['p99'], False),
 ('serving', 'e2e p50 ms', lambda s: s['e2e_ms']['p50'], False),
]
print('| figure | before (918ca10) | after (main, defaults) | after, sync scheduling / old policy | after / before | after_b / before |')
print('|---|---|---|---|---|---|')
for kind,name,f,hi in rows:
    v={k:[f(json.load(open(f'{out}/{k}-{r}-{kind}.json'))) for r in range(1,R+1)] for k in ('before','after','after_b')}
    fm=lambda xs:' / '.join(f'{x:.1f}' for x in xs)
    m=lambda k: st.mean(v[k])
    print(f"| {kind}: {name} | {fm(v['before'])} | {fm(v['after'])} | {fm(v['after_b'])} | {m('after')/m('before'):.2f} | {m('after_b')/m('before'):.2f} |")
