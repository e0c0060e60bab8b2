"""Python 2 code from an old multi-GPU tutorial: does not parse under Python 3."""
import tensorflow as tf

print "building graph"
try:
    sess = tf.Session()
except Exception, e:
    print e
