"""The fixed parts of `turnstile view`'s page: its style, its script, and the head whose
Content-Security-Policy allows only those two, by their hashes."""

from __future__ import annotations

__all__ = ["CSP", "CSS", "HEAD", "JS"]

import base64
import hashlib


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1b1d22}
header{padding:12px 20px;background:#fff;border-bottom:1px solid #dde}
h1{font-size:18px;margin:0 0 8px}h2{font-size:16px;margin:16px 0 8px}h3{font-size:14px;margin:0}
main{padding:0 20px 40px}table.ov{border-collapse:collapse}
.ov td,.ov th{border:1px solid #dde;padding:2px 8px;text-align:left;vertical-align:top}
.card{background:#fff;border:1px solid #dde;border-left:4px solid #5668d8;border-radius:4px;
margin:8px 0;padding:6px 10px;content-visibility:auto;contain-intrinsic-size:auto 240px}
.card.start{border-left-color:#888}.card.finalize,.card.summarize{border-left-color:#b07b00}
.card.err{border-left-color:#c0392b}.card ol{list-style:none;margin:4px 0 0;padding:0}
.card li{padding:3px 0;border-top:1px solid #f0f0f4}
.n{color:#889;margin-right:6px;font-size:12px}.t{color:#889;margin-right:8px;font-size:12px}
.fk{display:block;color:#7a8;font-size:11px;user-select:all}.sh{opacity:.55}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0 2px 16px;max-height:24em;overflow:auto;
background:#f7f7fa;padding:2px 6px;font:12px/1.35 ui-monospace,monospace}
.tok{display:block;color:#566;font-size:12px}.id{color:#889}
.fail b,.deny b,.terr b,.err{color:#c0392b}.retry b{color:#b07b00}.ok b{color:#1e8449}
.cmp{color:#b07b00}.mark{color:#5668d8;font-weight:600}.end b{color:#1b1d22}
.hidden{display:none}summary{cursor:pointer}.msg{margin-left:8px}
.sub{margin:4px 0 4px 16px;padding-left:8px;border-left:2px solid #5668d8}
"""
JS = """
(function(){
var q=document.getElementById('q'),all=document.getElementById('all'),open=false;
q.addEventListener('input',function(){var s=q.value.toLowerCase();
document.querySelectorAll('.card').forEach(function(c){
c.classList.toggle('hidden',s!==''&&c.textContent.toLowerCase().indexOf(s)<0);});});
all.addEventListener('click',function(){open=!open;
document.querySelectorAll('details').forEach(function(d){d.open=open;});
all.textContent=open?'collapse all':'expand all';});
})();
"""
CSP = f"default-src 'none'; style-src {_hash(CSS)}; script-src {_hash(JS)}; img-src data:"
HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><title>turnstile · {title}</title>
<style>{css}</style></head><body>
"""
