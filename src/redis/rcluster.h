/* rcluster.h -- Redis Cluster arithmetic: hash slots, the slot map, redirects.
 *
 * Pure functions and one plain data structure, no I/O: the asynchronous client
 * (rds_cluster.c) and the blocking one (rcl_sync.c) both build on them.
 *
 *   slot      CRC16-XMODEM of the key, or of the first non-empty "{...}" part of it (the
 *             hash tag), modulo 16384 -- the cluster specification's rule;
 *   map       slot -> master node, filled from a CLUSTER SLOTS reply; nodes are kept in a
 *             small table (index = node id) and are never removed, so an index stays valid
 *             for the life of the map (a node that leaves simply owns no slot);
 *   redirect  "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381" parsed;
 *   key       which argument of a command is its key (for routing).
 *
 * Ownership: an rcluster_map_t is a value owned by whoever declares it; nothing inside points
 * outside it. */
#ifndef SECKILL_RCLUSTER_H
#define SECKILL_RCLUSTER_H

#include <stddef.h>
#include <stdint.h>

struct redisReply;

#define RCL_SLOTS 16384
#define RCL_MAX_NODES 64          /* masters and replicas ever seen by one map */
#define RCL_NO_NODE 0xFFFF
#define RCL_HOST_MAX 256

uint16_t rcluster_crc16(const char *buf, size_t len);
/* The hash slot of a key (hash tags honoured). */
unsigned rcluster_slot(const char *key, size_t len);

typedef struct rcluster_node {
    char host[RCL_HOST_MAX];
    int port;
} rcluster_node_t;

typedef struct rcluster_map {
    rcluster_node_t nodes[RCL_MAX_NODES];
    int nnodes;
    uint16_t slot_node[RCL_SLOTS];   /* index into nodes, or RCL_NO_NODE */
    int nslots;                      /* slots with an owner */
} rcluster_map_t;

void rcluster_map_init(rcluster_map_t *m);
/* The node's index, added if new; -1 when the table is full or host is too long. */
int rcluster_map_node(rcluster_map_t *m, const char *host, size_t hostlen, int port);
/* Replaces every slot owner with what a CLUSTER SLOTS reply says (masters only; nodes
 * stay in the table). An empty host in the reply ("" or "?": the node we asked, which
 * does not know its own address) is replaced by asked_host. Returns the number of slots
 * covered, or -1 if the reply is not a CLUSTER SLOTS reply (the map is then unchanged). */
int rcluster_map_load(rcluster_map_t *m, const struct redisReply *r, const char *asked_host);
/* Index of the node owning slot, or -1. */
int rcluster_map_owner(const rcluster_map_t *m, unsigned slot);
/* Indexes of the nodes that own at least one slot (the masters), ascending; returns how
 * many (<= RCL_MAX_NODES). */
int rcluster_map_masters(const rcluster_map_t *m, int *out);

/* Redirect errors. */
enum { RCL_ERR_OTHER = 0, RCL_ERR_MOVED, RCL_ERR_ASK, RCL_ERR_TRYAGAIN, RCL_ERR_CLUSTERDOWN };
/* Classifies an error text; for MOVED/ASK also fills slot, host and port (an empty host,
 * "MOVED 1 :6380", means "the host you asked", and is returned as ""). A malformed
 * MOVED/ASK is RCL_ERR_OTHER. */
int rcluster_parse_error(const char *s, size_t len, unsigned *slot, char *host, size_t hostcap,
                    int *port);

/* Which argument is the command's key: 1 for most commands, 2 for XGROUP/XINFO
 * subcommands, 3 for EVAL/EVALSHA/FCALL with numkeys > 0, and -1 for commands without
 * one (PING, INFO, SCRIPT, CLUSTER, ...) which any node may answer. */
int rcluster_key_index(int argc, const char **argv, const size_t *argvlen);

#endif
