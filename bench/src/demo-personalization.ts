/**
 * The personalization part of `npm start`: two users with different histories get different
 * `for_you` feeds, and an item one of them hides leaves their feed (and only theirs).
 *
 * The demo's schema gives no signal kind a preference rate, so a history does not move a
 * preference vector by itself: each user is written with an embedding (where the preference
 * starts: the mean of the items they engaged), and the history's signals carry the user, so the
 * items join their seen set (left out with `userFilter: { unseen: true }`).
 */
import type { TidalDb } from 'tidal-core';
import { normalize, type Corpus } from './corpus.js';

const log = (line = ''): void => void process.stdout.write(`${line}\n`);

/** Writes two users and their histories into the demo's database and prints their feeds. */
export async function showPersonalization(db: TidalDb, corpus: Corpus): Promise<void> {
  const people = [
    { id: 'mia', likes: 'music' },
    { id: 'theo', likes: 'science' },
  ];
  const history = new Map<string, string[]>();
  for (const p of people) {
    const picked: number[] = [];
    for (let i = 0; i < corpus.size && picked.length < 8; i++) if (corpus.item(i).metadata.category === p.likes) picked.push(i);
    const mean = new Float32Array(corpus.dims);
    for (const i of picked) corpus.item(i).embedding.forEach((x, k) => (mean[k]! += x));
    await db.upsertUsers([{ id: p.id, embedding: normalize(mean) }]);
    await db.signals(picked.map((i) => ({ item: corpus.id(i), kind: 'view', user: p.id })));
    history.set(
      p.id,
      picked.map((i) => corpus.id(i)),
    );
  }

  const show = async (user: string, title: string): Promise<string[]> => {
    const r = await db.retrieve({ profile: 'for_you', user, userFilter: { unseen: true }, limit: 5 });
    log();
    log(`${title}  (${r.tookMs.toFixed(2)} ms)`);
    log(`  db.retrieve({ profile: 'for_you', user: '${user}', userFilter: { unseen: true }, limit: 5 })`);
    for (const it of r.items) {
      const item = corpus.item(corpus.indexOf(it.id));
      log(
        `  ${String(it.rank).padStart(2)}. ${it.id}  ${item.metadata.category.padEnd(10)} ${item.metadata.creator}  score ${it.score.toFixed(3)}  similarity ${(it.similarity ?? 0).toFixed(2)}`,
      );
    }
    return r.items.map((i) => i.id);
  };

  log();
  log('personalization: two users, eight views each');
  for (const p of people) log(`  ${p.id} viewed ${p.likes} items: ${history.get(p.id)!.slice(0, 3).join(', ')}, …`);
  const miaFeed = await show('mia', `for_you for mia (history in music; the items she saw are left out)`);
  await show('theo', `for_you for theo (history in science)`);
  const hidden = miaFeed[0]!;
  await db.hide({ user: 'mia', item: hidden });
  log();
  log(`mia hides ${hidden}:  db.hide({ user: 'mia', item: '${hidden}' })`);
  const after = await show('mia', 'for_you for mia after the hide (it never comes back to her, at any level)');
  log(`  ${after.includes(hidden) ? 'STILL THERE (a bug)' : `${hidden} is gone; ${after[0]} moved up`}`);
}
