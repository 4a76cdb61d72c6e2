-- schema.mysql.sql -- the flash-sale tables on MySQL/MariaDB (built into the binary).
--
-- The course's four tables (hm-dianping, db `hmdp`, hmdp-spec §4), InnoDB and utf8mb4, kept
-- column for column, plus what the course lacks: UNIQUE (user_id, voucher_id) on orders, so
-- one-order-per-user holds in the database and a replayed stream entry changes nothing.
-- The same schema as sql/schema.sqlite.sql, in MySQL's types.
--
-- store_open() (src/store/store_mysql.c) runs this file, one statement at a time, as prepared
-- statements, under the named lock GET_LOCK('seckill.schema') so instances starting at
-- once do not race, whenever schema_version holds a version below MYSQL_SCHEMA_VERSION.
-- It must stay idempotent (IF NOT EXISTS, upserts). A future change appends the statements
-- that take version N to N+1 (each safe to run again) and raises the number in the last
-- statement together with MYSQL_SCHEMA_VERSION in src/store/store_mysql.c.
--
-- File rules (the loader splits naively): statements end with ';' at the end of a line;
-- '--' starts a comment to the end of the line; no ';' or '--' inside string literals.
--
-- Times are DATETIME in the writing server's local time zone (what the SQLite schema holds
-- as text), not the course's TIMESTAMP: no session time-zone conversion, no 2038 limit, and
-- every instance behind nginx writes what its own clock says. store.h speaks epoch seconds;
-- src/store/store_mysql.c converts. Money is in cents.

CREATE TABLE IF NOT EXISTS schema_version (
    id          TINYINT UNSIGNED NOT NULL,
    version     INT              NOT NULL,
    update_time DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- The course's AUTO_INCREMENT starting points: the first self-registered user is 1010.
CREATE TABLE IF NOT EXISTS tb_user (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    phone       VARCHAR(11)     NOT NULL,
    password    VARCHAR(128)    NULL DEFAULT '',
    nick_name   VARCHAR(32)     NULL DEFAULT '',
    icon        VARCHAR(255)    NULL DEFAULT '',
    create_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    update_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    UNIQUE KEY uniqe_key_phone (phone)
) ENGINE = InnoDB AUTO_INCREMENT = 1010 DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- ... and the first voucher is 10.
CREATE TABLE IF NOT EXISTS tb_voucher (
    id           BIGINT UNSIGNED  NOT NULL AUTO_INCREMENT,
    shop_id      BIGINT UNSIGNED  NULL DEFAULT NULL,
    title        VARCHAR(255)     NOT NULL,
    sub_title    VARCHAR(255)     NULL DEFAULT NULL,
    rules        VARCHAR(1024)    NULL DEFAULT NULL,
    pay_value    BIGINT UNSIGNED  NOT NULL,            -- cents
    actual_value BIGINT           NOT NULL,            -- cents
    type         TINYINT UNSIGNED NOT NULL DEFAULT 0,  -- 0 normal, 1 flash sale
    status       TINYINT UNSIGNED NOT NULL DEFAULT 1,  -- 1 on shelf, 2 off shelf, 3 expired
    create_time  DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP,
    update_time  DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    KEY idx_voucher_shop (shop_id, status)
) ENGINE = InnoDB AUTO_INCREMENT = 10 DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- One row per flash-sale voucher (1:1 with tb_voucher). stock is what SQL has not yet
-- sold: the order writer lowers it by the orders it inserts, in the same transaction.
-- No CHECK (stock >= 0): see docs/store.md.
CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
    voucher_id  BIGINT UNSIGNED NOT NULL,
    stock       INT             NOT NULL,
    create_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    begin_time  DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    end_time    DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    update_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- id comes from the order-id generator (orderid.h), never from the database. The unique
-- key is ordered by user_id first, so it also serves "orders of a user";
-- idx_order_voucher serves per-voucher counts (audit, store_voucher_counts).
CREATE TABLE IF NOT EXISTS tb_voucher_order (
    id          BIGINT           NOT NULL,
    user_id     BIGINT UNSIGNED  NOT NULL,
    voucher_id  BIGINT UNSIGNED  NOT NULL,
    pay_type    TINYINT UNSIGNED NOT NULL DEFAULT 1,  -- 1 balance, 2 Alipay, 3 WeChat
    status      TINYINT UNSIGNED NOT NULL DEFAULT 1,  -- 1 unpaid 2 paid 3 used 4 cancelled 5 refunding 6 refunded
    create_time DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP,
    pay_time    DATETIME         NULL DEFAULT NULL,
    use_time    DATETIME         NULL DEFAULT NULL,
    refund_time DATETIME         NULL DEFAULT NULL,
    update_time DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    UNIQUE KEY uniq_order_user_voucher (user_id, voucher_id),
    KEY idx_order_voucher (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Version 2. Not the course's: the Redis generation of each flash-sale voucher
-- (src/rebuild/rebuild.c). A rebuild of a voucher's Redis keys from SQL raises it (holding the
-- tb_seckill_voucher row lock); the order writer writes an order only if it was admitted
-- under the current one (store_orders_write). No row = 0.
CREATE TABLE IF NOT EXISTS tb_seckill_epoch (
    voucher_id  BIGINT UNSIGNED NOT NULL,
    epoch       BIGINT          NOT NULL DEFAULT 0,
    update_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Version 3: nothing here. It was the lab's order table, lab_voucher_order, which the lab
-- makes itself when a lab mode starts (src/lab/lab_store.c): a database the lab never
-- ran in does not have it, and one that has it keeps it.

-- Version 4: a flash-sale voucher's stock buckets (docs/redis-cluster.md, "Stock
-- buckets"), so a rebuild of Redis from SQL brings every bucket back. A side table, not a
-- column of tb_seckill_voucher, so the course's tables stay column for column what the
-- Java backend sharing the database expects. No row = 1 (unbucketed).
CREATE TABLE IF NOT EXISTS tb_seckill_buckets (
    voucher_id  BIGINT UNSIGNED NOT NULL,
    buckets     INT             NOT NULL DEFAULT 1,
    create_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Version 5: the course's shop tables (hmdp-spec section 2.4), read by GET /shop/{id},
-- /shop/of/type, /shop/of/name and /shop-type/list (src/api/api_shop.c), seeded with the
-- course's ten shop types and its shop 1 (the shop of the walk-through's vouchers).
-- INSERT IGNORE keeps rows that exist (a course database has all fourteen shops).
CREATE TABLE IF NOT EXISTS tb_shop_type (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    name        VARCHAR(32)     NULL DEFAULT NULL,
    icon        VARCHAR(255)    NULL DEFAULT NULL,
    sort        INT UNSIGNED    NULL DEFAULT NULL,
    create_time DATETIME        NULL DEFAULT CURRENT_TIMESTAMP,
    update_time DATETIME        NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id)
) ENGINE = InnoDB AUTO_INCREMENT = 11 DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

CREATE TABLE IF NOT EXISTS tb_shop (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    name        VARCHAR(128)    NOT NULL,
    type_id     BIGINT UNSIGNED NOT NULL,
    images      VARCHAR(1024)   NOT NULL,     -- comma-separated URLs
    area        VARCHAR(128)    NULL DEFAULT NULL,
    address     VARCHAR(255)    NOT NULL,
    x           DOUBLE          NOT NULL,     -- longitude
    y           DOUBLE          NOT NULL,     -- latitude
    avg_price   BIGINT UNSIGNED NULL DEFAULT NULL,
    sold        INT UNSIGNED    NOT NULL,
    comments    INT UNSIGNED    NOT NULL,
    score       INT UNSIGNED    NOT NULL,     -- 1-5 times 10
    open_hours  VARCHAR(32)     NULL DEFAULT NULL,
    create_time DATETIME        NULL DEFAULT CURRENT_TIMESTAMP,
    update_time DATETIME        NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    KEY foreign_key_type (type_id)
) ENGINE = InnoDB AUTO_INCREMENT = 2 DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

INSERT IGNORE INTO tb_shop_type (id, name, icon, sort) VALUES
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

INSERT IGNORE INTO tb_shop (id, name, type_id, images, area, address, x, y, avg_price, sold,
                            comments, score, open_hours) VALUES
    (1, '103茶餐厅', 1, '', '大关', '金华路锦昌文华苑29号', 120.149192, 30.316078, 80, 4215, 3035, 37, '10:00-22:00');

-- Version 6: a flash-sale voucher's waiting room (docs/waiting-room.md), so a rebuild of
-- Redis from SQL brings it back. A side table like tb_seckill_buckets. No row = no room.
CREATE TABLE IF NOT EXISTS tb_seckill_room (
    voucher_id  BIGINT UNSIGNED NOT NULL,
    admit_per_s INT UNSIGNED    NOT NULL,
    pass_ttl_s  INT UNSIGNED    NOT NULL DEFAULT 60,
    bot_gate    TINYINT(1)      NOT NULL DEFAULT 0,
    create_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Version 7. Not the course's: orders cancelled or timed out under --cancel-frees-buyer
-- (docs/lifecycle.md), moved out of tb_voucher_order (column for column the same) by the
-- cancel's transaction, so the course's UNIQUE (user_id, voucher_id) lets their buyer order
-- again while tb_voucher_order keeps one order per user. Status 4, or 6 once a late payment
-- was refunded.
CREATE TABLE IF NOT EXISTS tb_voucher_order_cancelled (
    id          BIGINT           NOT NULL,
    user_id     BIGINT UNSIGNED  NOT NULL,
    voucher_id  BIGINT UNSIGNED  NOT NULL,
    pay_type    TINYINT UNSIGNED NOT NULL DEFAULT 1,
    status      TINYINT UNSIGNED NOT NULL DEFAULT 4,
    create_time DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP,
    pay_time    DATETIME         NULL DEFAULT NULL,
    use_time    DATETIME         NULL DEFAULT NULL,
    refund_time DATETIME         NULL DEFAULT NULL,
    update_time DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    KEY idx_order_cancelled_user (user_id),
    KEY idx_order_cancelled_voucher (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- Version 8: the payments of flash-sale orders (docs/lifecycle.md, "Payments in SQL"): one
-- row per provider payment id, written by the order writer from the order's p / r event in
-- the transaction of the order's status change (sync mode: in the payment's own
-- transaction). status: 2 taken, 5 to refund (in the refund outbox), 6 refunded
-- (refund_time). A side table: the course's tables keep their columns.
-- A version-7 database from a development build may hold this table and lack
-- tb_voucher_order_cancelled: the file runs whole below 8, and IF NOT EXISTS creates what lacks.
CREATE TABLE IF NOT EXISTS tb_voucher_payment (
    payment_id  VARCHAR(64)      NOT NULL,            -- the provider's id
    order_id    BIGINT           NOT NULL,
    amount      BIGINT           NOT NULL,            -- cents
    status      TINYINT UNSIGNED NOT NULL,            -- 2 taken 5 refunding 6 refunded
    create_time DATETIME         NOT NULL DEFAULT CURRENT_TIMESTAMP,
    refund_time DATETIME         NULL DEFAULT NULL,
    PRIMARY KEY (payment_id),
    KEY idx_payment_order (order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Version 9: sync mode's refund sender (docs/lifecycle.md, "Sync mode's refunds"): a
-- payment at 5 is sent by the order writer that holds its lease, one row per payment ever
-- tried. tries: the sends claimed so far (each claim a CAS on it, so two instances never
-- send one refund at once); next_at (epoch seconds): while a send runs, the end of its
-- lease; after a failed one, its back-off's end. A side table: tb_voucher_payment keeps
-- its columns, and this file stays idempotent.
CREATE TABLE IF NOT EXISTS tb_refund_lease (
    payment_id  VARCHAR(64)      NOT NULL,
    tries       INT              NOT NULL,
    next_at     BIGINT           NOT NULL,
    PRIMARY KEY (payment_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE INDEX IF NOT EXISTS idx_payment_status ON tb_voucher_payment (status);

-- Last: the version this file brings the database to (MYSQL_SCHEMA_VERSION).
INSERT INTO schema_version (id, version) VALUES (1, 9)
    ON DUPLICATE KEY UPDATE version = GREATEST(version, 9);
