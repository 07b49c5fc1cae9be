#include "server/chat_page.h"

namespace tq {

const std::string& chat_page_html() {
  static const std::string page = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tqserve chat</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 48rem; margin: 0 auto; padding: 1rem; }
  #log { border: 1px solid #ccc; border-radius: 6px; padding: .5rem; min-height: 20rem; overflow-y: auto; }
  .msg { white-space: pre-wrap; margin: .4rem 0; }
  .user { color: #024; } .assistant { color: #222; } .error { color: #a00; }
  form { display: flex; gap: .5rem; margin-top: .5rem; }
  #input { flex: 1; padding: .4rem; }
  #status { color: #666; font-size: .85rem; }
</style>
</head>
<body>
<h1>tqserve</h1>
<div id="status">model: <span id="model">…</span></div>
<div id="log"></div>
<form id="form">
  <input id="input" autocomplete="off" placeholder="Type a message" autofocus>
  <button id="send" type="submit">Send</button>
</form>
<details><summary>Settings</summary>
  <label>API key <input id="key" type="password"></label>
  <label>max tokens <input id="max" type="number" value="256" min="1"></label>
  <label>temperature <input id="temp" type="number" value="0.7" step="0.1" min="0" max="2"></label>
</details>
<script>
const log = document.getElementById('log');
const history = [];
function headers() {
  const h = {'Content-Type': 'application/json'};
  const key = document.getElementById('key').value;
  if (key) h['Authorization'] = 'Bearer ' + key;
  return h;
}
function add(role, text) {
  const div = document.createElement('div');
  div.className = 'msg ' + role;
  div.textContent = text;
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  return div;
}
fetch('/v1/models', {headers: headers()}).then(r => r.json()).then(j => {
  document.getElementById('model').textContent = j.data[0].id + ' (KV ' + j.data[0].kv_cache_dtype + ')';
}).catch(() => {});
document.getElementById('form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const input = document.getElementById('input');
  const text = input.value.trim();
  if (!text) return;
  input.value = '';
  history.push({role: 'user', content: text});
  add('user', 'You: ' + text);
  const out = add('assistant', '');
  out.dataset.done = 'false';
  let answer = '';
  try {
    const res = await fetch('/v1/chat/completions', {method: 'POST', headers: headers(), body: JSON.stringify({
      messages: history, stream: true,
      max_tokens: Number(document.getElementById('max').value),
      temperature: Number(document.getElementById('temp').value)})});
    if (!res.ok) throw new Error((await res.json()).error.message);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        if (!event.startsWith('data: ')) continue;
        const data = event.slice(6);
        if (data === '[DONE]') continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const delta = j.choices.length ? j.choices[0].delta : null;
        if (delta && delta.content) { answer += delta.content; out.textContent = answer; log.scrollTop = log.scrollHeight; }
      }
    }
    history.push({role: 'assistant', content: answer});
  } catch (e) {
    out.className = 'msg error';
    out.textContent = 'Error: ' + e.message;
  }
  out.dataset.done = 'true';
});
</script>
</body>
</html>
)HTML";
  return page;
}

}  // namespace tq
