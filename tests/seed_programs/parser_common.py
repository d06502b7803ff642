'''
Common command line interface parser utils.

Ported from avolkov1/keras_experiments examples/cifar/parser_common.py (test client).
Edit: `ProtocolType` came from `keras_exp.distrib.cluster_mgrs.tfclusterdefs`, the TF1
cluster manager (tf.train.Server over gRPC/verbs/gdr), which has no TF2 equivalent to
import; its two protocol names are defined here so that `--rdma` still parses.
'''
from argparse import (
    HelpFormatter, RawDescriptionHelpFormatter,
    ArgumentParser)
from textwrap import dedent

from cifar_common import CifarTrainDefaults

__all__ = ('parser_def_mgpu', 'remove_options',)


class ProtocolType(object):  # edit: was keras_exp.distrib...tfclusterdefs.ProtocolType
    '''RDMA protocol names.'''
    verbs = 'verbs'
    gdr = 'gdr'


class SmartFormatterMixin(HelpFormatter):
    '''Arguments parser formatter that splits on \\n. Start help with "S|".'''

    def _split_lines(self, text, width):
        if text.startswith('S|'):
            return text[2:].splitlines()
        return HelpFormatter._split_lines(self, text, width)


class CustomFormatter(RawDescriptionHelpFormatter, SmartFormatterMixin):
    '''Convenience formatter_class for argparse help print out.'''


def parser_def_mgpu(desc):
    '''Define a prototyp parser with multi-gpu options and other common
    arguments.
    '''
    parser = ArgumentParser(description=dedent(desc),
                            formatter_class=CustomFormatter)

    parser.add_argument(
        '--mgpu', action='store', nargs='?', type=int,
        const=-1,
        help='S|Run on multiple-GPUs using all available GPUs on a system.\n'
        'If not passed does not use multiple GPU. If passed uses all GPUs.\n'
        'Optionally specify a number to use that many GPUs.\n')

    parser.add_argument(
        '--epochs', type=int, default=CifarTrainDefaults.epochs,
        help='S|Number of epochs to run training for.\n'
        '(Default: %(default)s)\n')

    parser.add_argument(
        '--network', nargs='?', type=str, const=None, default=None,
        help='S|Network domain to use.')

    parser.add_argument(
        '--rdma', action='store', nargs='?', type=str.lower,
        const=ProtocolType.verbs, default=None,
        choices=[ProtocolType.verbs, ProtocolType.gdr],
        help='S|Use RDMA with Tensorflow.')

    return parser


def remove_options(parser, options):
    '''Remove options from an ArgumentParser parser object.'''
    for option in options:
        for action in parser._actions:
            if vars(action)['option_strings'][0] == option:
                parser._handle_conflict_resolve(None, [(option, action)])
                break
