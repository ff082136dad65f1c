// A Standard Webhooks receiver's check, written from the specification with Node's crypto
// alone (no Strata code): TestLiveDeliveryVerifiedByAForeignVerifier feeds it one received
// request on stdin as JSON {secret, headers, body_base64, now?} and reads its verdict:
// exit 0 and "ok v1,<sig>" (the signature that matched), or exit 1 and the reason.
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');

const TOLERANCE_SECONDS = 5 * 60; // the specification's default

function refuse(reason) {
  process.stdout.write(reason);
  process.exit(1);
}

const input = JSON.parse(fs.readFileSync(0, 'utf8'));
const h = input.headers;
const id = h['webhook-id'];
const ts = h['webhook-timestamp'];
const header = h['webhook-signature'];
if (!id || !ts || !header) refuse('missing webhook-id, webhook-timestamp or webhook-signature');
if (!/^[0-9]+$/.test(ts)) refuse('webhook-timestamp is not an integer');
const now = input.now !== undefined ? input.now : Math.floor(Date.now() / 1000);
if (now - Number(ts) > TOLERANCE_SECONDS) refuse('timestamp too old');
if (Number(ts) - now > TOLERANCE_SECONDS) refuse('timestamp too new');

if (!input.secret.startsWith('whsec_')) refuse('the secret does not start with whsec_');
const key = Buffer.from(input.secret.slice('whsec_'.length), 'base64');
const body = Buffer.from(input.body_base64, 'base64');
const want = crypto.createHmac('sha256', key).update(`${id}.${ts}.`).update(body).digest();

for (const versioned of header.split(' ')) {
  const comma = versioned.indexOf(',');
  if (comma < 0 || versioned.slice(0, comma) !== 'v1') continue; // unknown versions are skipped
  const got = Buffer.from(versioned.slice(comma + 1), 'base64');
  if (got.length === want.length && crypto.timingSafeEqual(got, want)) {
    process.stdout.write('ok ' + versioned);
    process.exit(0);
  }
}
refuse('no matching signature');
