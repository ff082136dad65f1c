// mem0ai/oss imports better-sqlite3 at module load (its SQLite history manager and its
// in-memory vector store). The peer benchmark configures neither (disableHistory: true and
// the pgvector store), and the native module cannot be fetched prebuilt here, so this
// stand-in satisfies the import and refuses any use loudly.
class Database {
  constructor() {
    throw new Error("better-sqlite3 is not installed: the peer benchmark runs mem0 with disableHistory and pgvector only");
  }
}
module.exports = Database;
module.exports.default = Database;
