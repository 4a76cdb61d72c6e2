-- schema.sqlite.sql -- the flash-sale tables on SQLite (built into the binary).
--
-- The course's four tables (hm-dianping, db `hmdp`), kept column for column, plus what the
-- course lacks: UNIQUE (user_id, voucher_id) on orders, so one-order-per-user holds in
-- the database and a replayed stream entry changes nothing.
--
-- store_open() runs this whole file in one transaction when PRAGMA user_version is below
-- the version this file sets at its end, so it must stay idempotent (IF NOT EXISTS, guarded
-- inserts). A future change adds statements that bring version N to N+1 and raises the
-- number below together with SQLITE_SCHEMA_VERSION in src/store/store_sqlite.c.
--
-- Times are TEXT 'YYYY-MM-DD HH:MM:SS' in the server's local time zone (what SQLite's
-- datetime(..., 'localtime') writes, and what MySQL's timestamp shows); store.h speaks
-- epoch seconds and src/store/store_sqlite.c converts. Money is in cents (INTEGER).

CREATE TABLE IF NOT EXISTS tb_user (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    phone       TEXT    NOT NULL,
    password    TEXT    DEFAULT '',
    nick_name   TEXT    DEFAULT '',
    icon        TEXT    DEFAULT '',
    create_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    update_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    CONSTRAINT uniqe_key_phone UNIQUE (phone)
);

CREATE TABLE IF NOT EXISTS tb_voucher (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    shop_id      INTEGER,
    title        TEXT    NOT NULL,
    sub_title    TEXT,
    rules        TEXT,
    pay_value    INTEGER NOT NULL,            -- cents
    actual_value INTEGER NOT NULL,            -- cents
    type         INTEGER NOT NULL DEFAULT 0,  -- 0 normal, 1 flash sale
    status       INTEGER NOT NULL DEFAULT 1,  -- 1 on shelf, 2 off shelf, 3 expired
    create_time  TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    update_time  TEXT    NOT NULL DEFAULT (datetime('now', 'localtime'))
);
CREATE INDEX IF NOT EXISTS idx_voucher_shop ON tb_voucher (shop_id, status);

-- One row per flash-sale voucher (1:1 with tb_voucher). stock is what SQL has not yet
-- sold: the order writer lowers it by the orders it inserts, in the same transaction.
CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
    voucher_id  INTEGER PRIMARY KEY,
    stock       INTEGER NOT NULL,
    create_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    begin_time  TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    end_time    TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    update_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime'))
);

-- id comes from the order-id generator (orderid.h), never from SQLite: INTEGER PRIMARY
-- KEY without AUTOINCREMENT is the rowid itself, so lookups by id cost one b-tree search.
CREATE TABLE IF NOT EXISTS tb_voucher_order (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL,
    voucher_id  INTEGER NOT NULL,
    pay_type    INTEGER NOT NULL DEFAULT 1,   -- 1 balance, 2 Alipay, 3 WeChat
    status      INTEGER NOT NULL DEFAULT 1,   -- 1 unpaid 2 paid 3 used 4 cancelled 5 refunding 6 refunded
    create_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    pay_time    TEXT,
    use_time    TEXT,
    refund_time TEXT,
    update_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    CONSTRAINT uniq_order_user_voucher UNIQUE (user_id, voucher_id)
);
-- The unique index above is ordered by user_id first, so it also serves "orders of a
-- user". This one serves per-voucher counts (audit, store_voucher_counts); its keys grow
-- with the order id, so inserts append at its right edge.
CREATE INDEX IF NOT EXISTS idx_order_voucher ON tb_voucher_order (voucher_id);

-- The course's AUTO_INCREMENT starting points: the first self-registered user is 1010,
-- the first voucher 10. sqlite_sequence exists once an AUTOINCREMENT table does; SQLite
-- takes the larger of this and the largest id present, so this never lowers anything.
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'tb_user', 1009 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'tb_user');
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'tb_voucher', 9 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'tb_voucher');

-- Version 2: nothing here. It was the lab's order table, lab_voucher_order, which the lab
-- makes itself when a lab mode starts (src/lab/lab_store.c): a database the lab never
-- ran in does not have it, and one that has it keeps it.

-- Version 3. Not the course's: the Redis generation of each flash-sale voucher (src/rebuild/rebuild.c). A
-- rebuild of a voucher's Redis keys from SQL raises it; the order writer writes an order
-- only if it was admitted under the current one (store_orders_write). No row = 0.
CREATE TABLE IF NOT EXISTS tb_seckill_epoch (
    voucher_id  INTEGER PRIMARY KEY,
    epoch       INTEGER NOT NULL DEFAULT 0,
    update_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime'))
);

-- Version 4. Not the course's: a flash-sale voucher's stock buckets (docs/redis-cluster.md,
-- "Stock buckets"), so a rebuild of Redis from SQL brings every bucket back. A side table,
-- not a column of tb_seckill_voucher, so the course's tables stay column for column what
-- the Java backend sharing the database expects. No row = 1 (unbucketed).
CREATE TABLE IF NOT EXISTS tb_seckill_buckets (
    voucher_id  INTEGER PRIMARY KEY,
    buckets     INTEGER NOT NULL DEFAULT 1,
    create_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime'))
);

-- Version 5. The course's shop tables (hmdp-spec section 2.4), read by GET /shop/{id},
-- /shop/of/type, /shop/of/name and /shop-type/list (src/api/api_shop.c). Seeded with the
-- course's ten shop types and its shop 1, the shop the walk-through's vouchers belong to
-- (shopId 1), so the course's pages show something on a new database. INSERT OR IGNORE
-- keeps rows an operator changed. x, y: longitude and latitude; score: 1-5 times 10.
CREATE TABLE IF NOT EXISTS tb_shop_type (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT,
    icon        TEXT,
    sort        INTEGER,
    create_time TEXT    DEFAULT (datetime('now', 'localtime')),
    update_time TEXT    DEFAULT (datetime('now', 'localtime'))
);

CREATE TABLE IF NOT EXISTS tb_shop (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    type_id     INTEGER NOT NULL,
    images      TEXT    NOT NULL,             -- comma-separated URLs
    area        TEXT,
    address     TEXT    NOT NULL,
    x           REAL    NOT NULL,
    y           REAL    NOT NULL,
    avg_price   INTEGER,
    sold        INTEGER NOT NULL,
    comments    INTEGER NOT NULL,
    score       INTEGER NOT NULL,
    open_hours  TEXT,
    create_time TEXT    DEFAULT (datetime('now', 'localtime')),
    update_time TEXT    DEFAULT (datetime('now', 'localtime'))
);
CREATE INDEX IF NOT EXISTS idx_shop_type ON tb_shop (type_id);

INSERT OR IGNORE INTO tb_shop_type (id, name, icon, sort) VALUES
    (1, '美食', '/types/ms.png', 1),
    (2, 'KTV', '/types/KTV.png', 2),
    (3, '丽人·美发', '/types/lrmf.png', 3),
    (4, '健身运动', '/types/jsyd.png', 10),
    (5, '按摩·足疗', '/types/amzl.png', 5),
    (6, '美容SPA', '/types/spa.png', 6),
    (7, '亲子游乐', '/types/qzyl.png', 7),
    (8, '酒吧', '/types/jiuba.png', 8),
    (9, '轰趴馆', '/types/hpg.png', 9),
    (10, '美睫·美甲', '/types/mjmj.png', 10);
INSERT OR IGNORE INTO tb_shop (id, name, type_id, images, area, address, x, y, avg_price, sold,
                               comments, score, open_hours) VALUES
    (1, '103茶餐厅', 1, '', '大关', '金华路锦昌文华苑29号', 120.149192, 30.316078, 80, 4215, 3035, 37, '10:00-22:00');

-- Version 6. Not the course's: a flash-sale voucher's waiting room (docs/waiting-room.md),
-- so a rebuild of Redis from SQL brings it back. A side table like tb_seckill_buckets.
-- No row = no waiting room.
CREATE TABLE IF NOT EXISTS tb_seckill_room (
    voucher_id  INTEGER PRIMARY KEY,
    admit_per_s INTEGER NOT NULL,
    pass_ttl_s  INTEGER NOT NULL DEFAULT 60,
    bot_gate    INTEGER NOT NULL DEFAULT 0,
    create_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime'))
);

-- Version 7. Not the course's: orders cancelled or timed out under --cancel-frees-buyer
-- (docs/lifecycle.md), moved out of tb_voucher_order (column for column the same) by the
-- cancel's transaction, so the course's UNIQUE (user_id, voucher_id) lets their buyer order
-- again while tb_voucher_order keeps one order per user. Status 4, or 6 once a late payment
-- was refunded.
CREATE TABLE IF NOT EXISTS tb_voucher_order_cancelled (
    id          INTEGER PRIMARY KEY,
    user_id     INTEGER NOT NULL,
    voucher_id  INTEGER NOT NULL,
    pay_type    INTEGER NOT NULL DEFAULT 1,
    status      INTEGER NOT NULL DEFAULT 4,
    create_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    pay_time    TEXT,
    use_time    TEXT,
    refund_time TEXT,
    update_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime'))
);
CREATE INDEX IF NOT EXISTS idx_order_cancelled_user ON tb_voucher_order_cancelled (user_id);
CREATE INDEX IF NOT EXISTS idx_order_cancelled_voucher ON tb_voucher_order_cancelled (voucher_id);

-- Version 8. Not the course's: the payments of flash-sale orders (docs/lifecycle.md, "Payments
-- in SQL"): one row per provider payment id (POST /pay/notify), written by the order
-- writer from the order's p / r event in the transaction of the order's status change (sync
-- mode: in the payment's own transaction). status: 2 taken (the order paid), 5 to refund
-- (退款中: in the refund outbox), 6 refunded (the refund was sent; refund_time). A side
-- table: the course's tables keep their columns.
-- A version-7 database from a development build may hold this table and lack
-- tb_voucher_order_cancelled: the file runs whole below 8, and IF NOT EXISTS creates what lacks.
CREATE TABLE IF NOT EXISTS tb_voucher_payment (
    payment_id  TEXT    PRIMARY KEY,          -- the provider's id: one row per payment
    order_id    INTEGER NOT NULL,
    amount      INTEGER NOT NULL,             -- cents
    status      INTEGER NOT NULL,             -- 2 taken 5 refunding 6 refunded
    create_time TEXT    NOT NULL DEFAULT (datetime('now', 'localtime')),
    refund_time TEXT
);
CREATE INDEX IF NOT EXISTS idx_payment_order ON tb_voucher_payment (order_id);

-- Version 9. Not the course's: sync mode's refund sender (docs/lifecycle.md, "Sync mode's
-- refunds"): a payment at 5 is sent by the order writer that holds its lease, one row per
-- payment ever tried. tries: the sends claimed so far (each claim a CAS on it, so two
-- instances never send one refund at once); next_at (epoch seconds): while a send runs, the
-- end of its lease; after a failed one, its back-off's end. A side table: tb_voucher_payment
-- keeps its columns, and this file stays idempotent.
CREATE TABLE IF NOT EXISTS tb_refund_lease (
    payment_id  TEXT    PRIMARY KEY,
    tries       INTEGER NOT NULL,
    next_at     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_payment_status ON tb_voucher_payment (status);

PRAGMA user_version = 9;
