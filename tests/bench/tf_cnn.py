#!/usr/bin/env python3
"""tf_cnn.py - the TensorFlow peer of dtf-train for tests/bench/cpu_vs_pytorch.sh.

Trains the Fashion-MNIST CNN of graphs/fashion_mnist_cnn.yaml with
TensorFlow/Keras `model.fit` (tf_keras, the Keras 2 that TensorFlow's
multi-worker guide runs: Keras 3.15's fit() fails under
MultiWorkerMirroredStrategy, reducing scalar logs over axis 0): conv 5x5x32 same + relu, max pool 2, conv
5x5x64 same + relu, max pool 2, flatten, dense 1024 + relu, dropout 0.4,
dense 10; Adam (lr 1e-3, eps 1e-7), sparse softmax cross-entropy from
logits; Keras' default Glorot-uniform kernels and zero biases.  The input
is the same TFRecord shards dtf-train reads (datasets/prepare.sh), read by
a `tf.data.TFRecordDataset` and parsed with `tf.io.parse_single_example`
(`image`: 784 raw uint8 bytes, 28x28x1, scaled by 1/255; `label`: int64),
shuffled through a 10,000-example buffer as the job file does.

One process:            python3 tf_cnn.py --threads 2 --batch 64 ...
Two workers of tf.distribute.MultiWorkerMirroredStrategy, one process each,
launched like dtf-train:
                        mpirun -np 2 python3 tf_cnn.py --threads 1 ...
(the rank and world size come from Open MPI's environment, and each
process writes its own TF_CONFIG naming 127.0.0.1:PORT+i for worker i,
unless TF_CONFIG is set already; mpirun only starts the processes, the
gradients go over TensorFlow's own collectives).  --batch is the GLOBAL
batch: the strategy splits each batch over the workers, and the training
shards are split between them by file.

Prints, from rank 0, lines the benchmark script parses:
  RESULT samples_per_s=X steps=N warmup=W        steady state, after warm-up
  RSS rank=R peak_mb=M                           every rank, ru_maxrss
  EVAL step=S seconds=T accuracy=A               with --eval-every
"""
import argparse
import glob
import json
import os
import resource
import sys
import time

T_START = time.time()


def tf_config(port):
    """TF_CONFIG for Open MPI's rank, or None for one process."""
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    if "TF_CONFIG" in os.environ:
        c = json.loads(os.environ["TF_CONFIG"])
        return c, c["task"]["index"], len(c["cluster"]["worker"])
    if world == 1:
        return None, 0, 1
    c = {"cluster": {"worker": ["127.0.0.1:%d" % (port + i) for i in range(world)]},
         "task": {"type": "worker", "index": rank}}
    os.environ["TF_CONFIG"] = json.dumps(c)
    return c, rank, world


def parse(tf, record):
    f = tf.io.parse_single_example(record, {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    })
    image = tf.reshape(tf.io.decode_raw(f["image"], tf.uint8), [28, 28, 1])
    return tf.cast(image, tf.float32) * (1.0 / 255.0), f["label"]


def dataset(tf, pattern, batch, train, seed, threads):
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit("tf_cnn.py: no files match %s (run datasets/prepare.sh)" % pattern)
    ds = tf.data.TFRecordDataset(files)
    if train:
        ds = ds.shuffle(10000, seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.map(lambda r: parse(tf, r), num_parallel_calls=threads)
    ds = ds.batch(batch, drop_remainder=train).prefetch(2)
    o = tf.data.Options()
    o.threading.private_threadpool_size = threads
    # the 4 training shards go 2 and 2 to the workers; the 1 test shard is
    # split by example
    o.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.FILE if train
        else tf.data.experimental.AutoShardPolicy.DATA)
    return ds.with_options(o)


def build(keras):
    L = keras.layers
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        L.Conv2D(32, 5, padding="same", activation="relu"),
        L.MaxPooling2D(2),
        L.Conv2D(64, 5, padding="same", activation="relu"),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(1024, activation="relu"),
        L.Dropout(0.4),
        L.Dense(10, name="logits"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3, epsilon=1e-7),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.path.join(root, "datasets", "fashion-mnist"))
    ap.add_argument("--batch", type=int, default=64, help="global batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="stop after N steps")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--stop-at", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--port", type=int, default=29617, help="worker i listens on PORT+i")
    a = ap.parse_args()

    cfg, rank, world = tf_config(a.port)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras as keras

    # threads are set before anything else touches the runtime
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    keras.utils.set_random_seed(a.seed)
    if a.batch % world:
        sys.exit("tf_cnn.py: --batch %d is not divisible by %d workers" % (a.batch, world))
    if cfg:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING))
    else:
        strategy = tf.distribute.get_strategy()
    with strategy.scope():
        model = build(keras)

    train = dataset(tf, os.path.join(a.data_dir, "train-*.tfrecord"), a.batch, True,
                    a.seed, a.threads)
    steps_per_epoch = 60000 // a.batch
    total = a.steps if a.steps else steps_per_epoch * a.epochs
    if rank == 0:
        print("tensorflow %s, keras %s: %d worker(s) x %d thread(s), global batch %d, %d steps"
              % (tf.__version__, keras.__version__, world, a.threads, a.batch, total), flush=True)

    class Clock(keras.callbacks.Callback):
        """Time of the end of step `warmup`, and the steps run."""
        def __init__(self):
            super().__init__()
            self.step, self.t_warm = 0, None

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            if self.step == a.warmup:
                self.t_warm = time.time()

    class EvalStop(keras.callbacks.Callback):
        """EVAL line after each validation; stop at --stop-at."""
        def on_epoch_end(self, epoch, logs=None):
            acc = float(logs["val_accuracy"])
            if rank == 0:
                print("EVAL step=%d seconds=%.2f accuracy=%.4f"
                      % ((epoch + 1) * a.eval_every, time.time() - T_START, acc), flush=True)
            if a.stop_at and acc >= a.stop_at:
                self.model.stop_training = True

    clock = Clock()
    if a.eval_every:
        test = dataset(tf, os.path.join(a.data_dir, "test-*.tfrecord"), a.batch, False,
                       a.seed, a.threads)
        rounds = -(-total // a.eval_every)
        model.fit(train, epochs=rounds, steps_per_epoch=a.eval_every, validation_data=test,
                  callbacks=[clock, EvalStop()], verbose=0)
    else:
        model.fit(train, epochs=1, steps_per_epoch=total, callbacks=[clock], verbose=0)
    t_end = time.time()
    if clock.t_warm is not None and clock.step > a.warmup and not a.eval_every and rank == 0:
        sps = (clock.step - a.warmup) * a.batch / (t_end - clock.t_warm)
        print("RESULT samples_per_s=%.1f steps=%d warmup=%d" % (sps, clock.step, a.warmup),
              flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("RSS rank=%d peak_mb=%.1f" % (rank, rss), flush=True)
    if cfg:
        # A worker that exits while the other is still shutting its
        # collectives down leaves that one waiting on the coordination
        # service's heartbeats for minutes: meet in one all-reduce, then
        # leave without TensorFlow's teardown.
        @tf.function
        def barrier():
            return strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
        barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
