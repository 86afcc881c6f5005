// The passkey ceremonies of the sign-in and invite pages: the only script of the console (the
// browser's WebAuthn API has no form equivalent). The server's options arrive as JSON with
// base64url byte strings; the browser's answer goes back the same way.
(function () {
  'use strict';
  const status = document.getElementById('passkey-status');
  const say = (msg) => { if (status) status.textContent = msg; };
  const b64u = {
    decode(s) {
      s = s.replace(/-/g, '+').replace(/_/g, '/');
      const bin = atob(s + '='.repeat((4 - (s.length % 4)) % 4));
      return Uint8Array.from(bin, (ch) => ch.charCodeAt(0)).buffer;
    },
    encode(buf) {
      let bin = '';
      for (const b of new Uint8Array(buf)) bin += String.fromCharCode(b);
      return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
    },
  };
  async function post(url, body) {
    const res = await fetch(url, {
      method: 'POST', credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json' }, body: body === undefined ? '{}' : JSON.stringify(body),
    });
    const doc = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(doc.error || ('The server answered ' + res.status + '.'));
    return doc;
  }
  function creationOptions(pk) {
    pk.challenge = b64u.decode(pk.challenge);
    pk.user.id = b64u.decode(pk.user.id);
    for (const c of pk.excludeCredentials || []) c.id = b64u.decode(c.id);
    return pk;
  }
  function requestOptions(pk) {
    pk.challenge = b64u.decode(pk.challenge);
    for (const c of pk.allowCredentials || []) c.id = b64u.decode(c.id);
    return pk;
  }
  function answer(cred) {
    const r = cred.response;
    const out = { id: cred.id, rawId: b64u.encode(cred.rawId), type: cred.type,
      clientExtensionResults: cred.getClientExtensionResults(), response: { clientDataJSON: b64u.encode(r.clientDataJSON) } };
    if (r.attestationObject) {
      out.response.attestationObject = b64u.encode(r.attestationObject);
      if (r.getTransports) out.response.transports = r.getTransports();
    } else {
      out.response.authenticatorData = b64u.encode(r.authenticatorData);
      out.response.signature = b64u.encode(r.signature);
      if (r.userHandle) out.response.userHandle = b64u.encode(r.userHandle);
    }
    return out;
  }
  async function run(button, register) {
    button.disabled = true;
    say(register ? 'Registering a passkey…' : 'Signing in…');
    try {
      const opts = await post(button.dataset.begin);
      const cred = register
        ? await navigator.credentials.create({ publicKey: creationOptions(opts.publicKey) })
        : await navigator.credentials.get({ publicKey: requestOptions(opts.publicKey) });
      const done = await post(button.dataset.finish, answer(cred));
      say('Signed in.');
      window.location.assign(done.next || '/console/');
    } catch (err) {
      say(err && err.message ? err.message : String(err));
      button.disabled = false;
    }
  }
  const reg = document.getElementById('passkey-register');
  if (reg) reg.addEventListener('click', () => run(reg, true));
  const sign = document.getElementById('passkey-signin');
  if (sign) sign.addEventListener('click', () => run(sign, false));
})();
